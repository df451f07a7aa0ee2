package frontdoor

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The NATS door (docs/spec.md §10): a micro service, so that `nats micro
// info ingest` and `nats micro stats ingest` show it like any NATS service.
const (
	ServiceName = "ingest"
	Subject     = "rf.submit"
	QueueGroup  = "ingest"
	// HdrStatus carries the answer's status code on a NATS reply.
	HdrStatus = "Rf-Status"
	// ServiceVersion is the micro service's version (semantic, as micro
	// requires): that of the door's interface.
	ServiceVersion = "1.0.0"
)

// AnswerTimeout bounds how long a NATS request waits for RAW: a requester
// waits no longer than its own time-out anyway.
const AnswerTimeout = time.Minute

// inlineBody is the largest NATS request body checked on the
// subscription's goroutine (a few records), not handed to a worker.
const inlineBody = 4 << 10

// ServeNATS adds the NATS door on nc: the micro service ServiceName of
// version with the endpoint Subject in queue group QueueGroup. A request
// is answered once RAW confirmed its records (Door.Start), or with a 503
// after AnswerTimeout; no goroutine waits for it meanwhile. A request
// without a reply subject, or whose reply subject is not an inbox
// (_INBOX.…), stores nothing and is not answered. Stop the returned
// service to stop taking requests.
func (d *Door) ServeNATS(nc *nats.Conn, version string) (micro.Service, error) {
	w := &workers{jobs: make(chan func()), idle: 10 * time.Second}
	return micro.AddService(nc, micro.Config{
		Name: ServiceName, Version: version, QueueGroup: QueueGroup,
		Description: "receiptflow's front door: submit NDJSON, a JSON object or a JSON array of events (docs/spec.md §10)",
		Endpoint: &micro.EndpointConfig{Subject: Subject, Handler: micro.HandlerFunc(func(req micro.Request) {
			if req.Reply() == "" {
				d.m.refused.WithLabelValues("nats", "no_reply").Inc()
				return
			}
			// The answer goes to the reply subject as the service's user,
			// who may publish to RAW: only an inbox is answered, so that no
			// producer can have an answer written anywhere else.
			if !strings.HasPrefix(req.Reply(), "_INBOX.") {
				d.m.refused.WithLabelValues("nats", "reply_subject").Inc()
				return
			}
			body := req.Data()
			ct := req.Headers().Get("Content-Type")
			start := func() {
				var expire atomic.Pointer[func(string)]
				t := time.AfterFunc(AnswerTimeout, func() {
					if f := expire.Load(); f != nil {
						(*f)("no answer from RAW within " + AnswerTimeout.String() + "; send the records again (what is stored is a duplicate)")
					}
				})
				f := d.Start("nats", ct, body, func(a *Answer) {
					t.Stop()
					b := a.AppendJSON(make([]byte, 0, 256))
					h := micro.Headers{HdrStatus: []string{strconv.Itoa(a.Code)}}
					if a.RetryAfter > 0 {
						h["Retry-After"] = []string{a.retryAfterSeconds()}
					}
					_ = req.Respond(b, micro.WithHeaders(h))
				})
				expire.Store(&f)
			}
			// A small body is taken on the subscription's goroutine; a
			// large one is parsed on a goroutine of its own.
			if len(body) <= inlineBody {
				start()
			} else {
				w.run(start)
			}
		})},
	})
}

// workers runs each function on a goroutine of its own, reusing one that
// finished its last function less than idle ago: a request's goroutine
// keeps the stack it grew instead of growing a new one.
type workers struct {
	jobs chan func() // unbuffered: taken only by a waiting goroutine
	idle time.Duration
}

func (w *workers) run(f func()) {
	select {
	case w.jobs <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		f()
		t.Reset(w.idle)
		select {
		case f = <-w.jobs:
		case <-t.C:
			return
		}
	}
}

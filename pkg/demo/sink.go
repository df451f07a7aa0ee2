package demo

import (
	"bytes"
	"context"
	"encoding/json"

	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// HTTPSink sends the feed's records to a front door (docs/spec.md §10) as
// a producer would: POST url with NDJSON bodies. Records are gathered for
// up to flushEvery (or 500 of them) and sent one request at a time, so
// they reach RAW in the feed's order; a 503 is sent again after its
// Retry-After. Publish returns the error of an earlier request that
// failed otherwise. Safe for one feed.
type HTTPSink struct {
	url    string
	token  string
	client *http.Client

	mu    sync.Mutex
	buf   bytes.Buffer
	n     int
	err   error
	kick  chan struct{}
	room  chan struct{}
	done  chan struct{}
	close chan struct{}
}

// sinkBatch bounds a request; flushEvery is how long a record may wait.
const (
	sinkBatch  = 500
	flushEvery = 50 * time.Millisecond
)

// NewHTTPSink starts a sink posting to url (with token as a bearer token,
// if set). Close it to send what it holds.
func NewHTTPSink(url, token string) *HTTPSink {
	s := &HTTPSink{url: url, token: token, client: &http.Client{Timeout: time.Minute},
		kick: make(chan struct{}, 1), room: make(chan struct{}, 1), done: make(chan struct{}), close: make(chan struct{})}
	go s.run()
	return s
}

// Publish queues one record; it waits while a full batch waits to be sent.
func (s *HTTPSink) Publish(ctx context.Context, line []byte) error {
	for {
		s.mu.Lock()
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		if s.n < 2*sinkBatch {
			s.buf.Write(bytes.TrimRight(line, "\n"))
			s.buf.WriteByte('\n')
			s.n++
			full := s.n >= sinkBatch
			s.mu.Unlock()
			if full {
				poke(s.kick)
			}
			return nil
		}
		s.mu.Unlock()
		poke(s.kick)
		select {
		case <-s.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close sends what the sink holds and stops it.
func (s *HTTPSink) Close() error {
	close(s.close)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *HTTPSink) run() {
	defer close(s.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		closing := false
		select {
		case <-s.kick:
		case <-t.C:
		case <-s.close:
			closing = true
		}
		for {
			s.mu.Lock()
			body := bytes.Clone(s.buf.Bytes())
			s.buf.Reset()
			s.n = 0
			s.mu.Unlock()
			poke(s.room)
			if len(body) == 0 {
				break
			}
			if err := s.post(body); err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				return
			}
			if !closing {
				break
			}
		}
		if closing {
			return
		}
	}
}

// post sends body until the door takes it: a 503 (or a lost connection)
// is sent again after its Retry-After, for up to a minute.
func (s *HTTPSink) post(body []byte) error {
	give := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		if s.token != "" {
			req.Header.Set("Authorization", "Bearer "+s.token)
		}
		wait := time.Second
		resp, err := s.client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				return nil
			case http.StatusServiceUnavailable:
				if sec, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil {
					wait = time.Duration(sec) * time.Second
				}
				err = fmt.Errorf("503: %s", answerError(b))
			default:
				return fmt.Errorf("demo: the front door answered %d: %s", resp.StatusCode, answerError(b))
			}
		}
		if time.Now().Add(wait).After(give) {
			return fmt.Errorf("demo: the front door did not take the records for a minute: %w", err)
		}
		time.Sleep(wait)
	}
}

// answerError is the error field of a door's JSON answer, or the body.
func answerError(b []byte) string {
	var a struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &a) == nil && a.Error != "" {
		return a.Error
	}
	return string(b)
}

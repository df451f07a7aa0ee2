package dashboard

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestServeAnswersTheFirstRequest: a request that reaches the listener
// before Serve is answered by the page's handler, never by the port's
// "not ready" 503 of the moment between serving and mounting (the API
// answers /api/zone whatever the bucket's state). Each round sends the
// request first, then serves.
func TestServeAnswersTheFirstRequest(t *testing.T) {
	_, url := testenv.NATS(t)
	svc, err := New(testenv.JetStream(t, url).Conn(), Config{Generation: "1", StaleAfter: time.Minute, Recent: 5})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 200; round++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("GET /api/zone?tz=UTC HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		port := svc.Serve(ln)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		port.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: the first request got %s", round, resp.Status)
		}
	}
}

package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/protocol"
)

// rawConn is one HTTP/1.1 connection to the daemon's socket, written and read by hand.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, socket string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// send writes a request's head (and body, when not nil: as application/json with its
// length).
func (c *rawConn) send(t *testing.T, method, target string, body []byte) {
	t.Helper()
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: kennel\r\n", method, target)
	if body != nil {
		head += fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
}

// reply reads one reply within 20 s; its body is read whole.
func (c *rawConn) reply(t *testing.T, method string) (*http.Response, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("reply body: %v", err)
	}
	return resp, b
}

// closedWithin reports how long the daemon took to close the connection: reads return
// EOF (or a reset); within bounds, or the test fails.
func (c *rawConn) closedWithin(t *testing.T, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(bound))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %v", bound)
	}
	return time.Since(start)
}

// apiError decodes an error reply's body, failing the test when it is not one.
func apiError(t *testing.T, resp *http.Response, body []byte) api.Error {
	t.Helper()
	var eb api.ErrorBody
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("status %d: content type %q, want application/json: %q", resp.StatusCode, ct, body)
	}
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
		t.Fatalf("status %d: not an API error body: %q (%v)", resp.StatusCode, body, err)
	}
	return eb.Error
}

// TestSlowBodyIsCutOff: a client that sends its headers and then trickles its body a
// byte a second is answered 408 timeout once Timeouts.Body has passed, and its
// connection closed; the 1000-byte body would take 1000 s.
func TestSlowBodyIsCutOff(t *testing.T) {
	r := serve(t, daemon.Options{Timeouts: daemon.Timeouts{Body: time.Second}})
	c := dialRaw(t, r.socket)
	start := time.Now()
	if _, err := io.WriteString(c, "POST /sessions HTTP/1.1\r\nHost: kennel\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	resp, body := c.reply(t, "POST")
	if resp.StatusCode != http.StatusRequestTimeout || apiError(t, resp, body).Code != api.CodeTimeout {
		t.Fatalf("status %d %q, want 408 timeout", resp.StatusCode, body)
	}
	c.closedWithin(t, 10*time.Second)
	t.Logf("a trickled body was cut off after %v", time.Since(start).Round(time.Millisecond))
}

// TestSlowHeadersAreCutOff: a client that trickles its request's headers a byte a second
// has its connection closed, unanswered, once Timeouts.Header has passed.
func TestSlowHeadersAreCutOff(t *testing.T) {
	r := serve(t, daemon.Options{Timeouts: daemon.Timeouts{Header: 500 * time.Millisecond}})
	c := dialRaw(t, r.socket)
	if _, err := io.WriteString(c, "GET /sessions HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for _, b := range []byte("Host: kennel\r\nX-Slow: " + strings.Repeat("x", 100)) {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	took := c.closedWithin(t, 10*time.Second)
	t.Logf("trickled headers were cut off after %v", took.Round(time.Millisecond))
}

// TestIdleKeepAliveIsClosed: a keep-alive connection that sends no next request is
// closed once Timeouts.Idle has passed.
func TestIdleKeepAliveIsClosed(t *testing.T) {
	r := serve(t, daemon.Options{Timeouts: daemon.Timeouts{Idle: 500 * time.Millisecond}})
	c := dialRaw(t, r.socket)
	c.send(t, "GET", "/sessions", nil)
	if resp, body := c.reply(t, "GET"); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d close %v: %q", resp.StatusCode, resp.Close, body)
	}
	took := c.closedWithin(t, 10*time.Second)
	t.Logf("an idle keep-alive connection was closed after %v", took.Round(time.Millisecond))
}

// TestStalledReaderIsCutOff: a client that takes none of a large reply has its connection
// closed once Timeouts.WriteStall has passed: reading later gets a part of the reply and
// the connection's end, not the whole reply.
func TestStalledReaderIsCutOff(t *testing.T) {
	r := serve(t, daemon.Options{Timeouts: daemon.Timeouts{WriteStall: 500 * time.Millisecond}})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Limits: &api.Limits{Off: true}}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const size = 8 << 20
	c := dialRaw(t, r.socket)
	c.send(t, "POST", "/sessions/"+s.ID+"/cells", fmt.Appendf(nil, `{"code":"print('x'*%d)"}`, size))
	// The reply is being written once the cell is counted; then the client stalls.
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := r.c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m, `kennel_cells_total{state="settled"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cell did not settle")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("read %d bytes, then the connection stayed open", n)
	}
	if n >= size {
		t.Fatalf("read %d bytes: the whole reply waited for a client that stalled", n)
	}
	t.Logf("a stalled client got %d of the reply's %d+ bytes before its connection was closed", n, size)
}

// TestSlowSteadyReaderGetsTheWholeReply: a client that reads a large reply slowly but
// steadily, for several times Timeouts.WriteStall in all, gets all of it: the stall bound
// is on progress, not on the reply (or on one large write of it).
func TestSlowSteadyReaderGetsTheWholeReply(t *testing.T) {
	r := serve(t, daemon.Options{Timeouts: daemon.Timeouts{WriteStall: time.Second}})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Limits: &api.Limits{Off: true}}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	c := dialRaw(t, r.socket)
	start := time.Now()
	c.send(t, "POST", "/sessions/"+s.ID+"/cells", fmt.Appendf(nil, `{"code":"print('x'*%d)"}`, size))
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: "POST"})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reply: %v %v", resp, err)
	}
	var got []byte
	buf := make([]byte, 128<<10)
	var rerr error
	for rerr == nil {
		var k int
		k, rerr = io.ReadFull(resp.Body, buf)
		got = append(got, buf[:k]...)
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	var rep api.CellReply
	if err := json.Unmarshal(got, &rep); err != nil || len(rep.Output.Text) != size+1 {
		t.Fatalf("read %d bytes in %v (%v), want the whole reply", len(got), took, rerr)
	}
	t.Logf("a slow reader got the whole %d-byte reply in %v", len(got), took.Round(time.Millisecond))
}

// TestLongRepliesOutliveTheTimeouts: the timeouts bound stalls, not replies: a streamed
// cell that writes for longer than every timeout, and a quiet cell that answers after
// longer than every timeout, both end with their result.
func TestLongRepliesOutliveTheTimeouts(t *testing.T) {
	const short = 300 * time.Millisecond
	r := serve(t, daemon.Options{Timeouts: daemon.Timeouts{Header: short, Body: short, Idle: short, WriteStall: short}})
	ctx := context.Background()
	s := r.newSession(t)
	var lines int
	rep, err := r.c.StreamCell(ctx, s.ID, api.RunCell{Code: "import time\nfor i in range(8):\n    print(i, flush=True); time.sleep(0.25)\n'done'"},
		func(ev api.Event) {
			if ev.Type == "stream" {
				lines += strings.Count(ev.Text, "\n")
			}
		})
	if err != nil || rep.State != "settled" || rep.Cell == nil || *rep.Cell.Result != "'done'" || lines != 8 {
		t.Fatalf("streamed cell: %+v %v (%d lines)", rep, err, lines)
	}
	rep, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import time\ntime.sleep(2)\n'quiet'"})
	if err != nil || rep.State != "settled" || rep.Cell == nil || *rep.Cell.Result != "'quiet'" {
		t.Fatalf("quiet cell: %+v %v", rep, err)
	}
}

// TestUnroutedRequestsAnswerAPIErrors: a path no route has is 404 no_route, a method a
// path's routes do not take is 405 method_not_allowed with Allow, a path the router would
// redirect is 404 too; each with the API's error body.
func TestUnroutedRequestsAnswerAPIErrors(t *testing.T) {
	r := serve(t, daemon.Options{})
	for _, tc := range []struct {
		method, target string
		status         int
		code           api.Code
		allow          string
	}{
		{"GET", "/nope", http.StatusNotFound, api.CodeNoRoute, ""},
		{"GET", "/", http.StatusNotFound, api.CodeNoRoute, ""},
		{"GET", "/sessions/", http.StatusNotFound, api.CodeNoRoute, ""},
		{"GET", "/sessions/x/../y", http.StatusNotFound, api.CodeNoRoute, ""},
		{"GET", "//sessions", http.StatusNotFound, api.CodeNoRoute, ""},
		{"PUT", "/sessions", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "GET, POST"},
		{"HEAD", "/sessions", http.StatusMethodNotAllowed, "", "GET, POST"},
		{"POST", "/sessions/x", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "DELETE, GET"},
		{"GET", "/sessions/x/jobs/j1/stop", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST"},
		{"DELETE", "/metrics", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "GET"},
		{"BREW", "/openapi.json", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "GET"},
		{"OPTIONS", "*", http.StatusNotFound, api.CodeNoRoute, ""},
	} {
		c := dialRaw(t, r.socket)
		c.send(t, tc.method, tc.target, nil)
		resp, body := c.reply(t, tc.method)
		if resp.StatusCode != tc.status || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: status %d Allow %q, want %d %q: %q", tc.method, tc.target, resp.StatusCode, resp.Header.Get("Allow"), tc.status, tc.allow, body)
			continue
		}
		if tc.method == "HEAD" {
			continue
		}
		if e := apiError(t, resp, body); e.Code != tc.code {
			t.Errorf("%s %s: code %s, want %s", tc.method, tc.target, e.Code, tc.code)
		}
	}
}

// TestNULInAPathFieldIsInvalid: a string field that becomes a path or an argument and
// holds a NUL byte is 400 invalid naming the field, and starts nothing.
func TestNULInAPathFieldIsInvalid(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		req   api.CreateSession
		field string
	}{
		{api.CreateSession{Cwd: dir + "/\x00x"}, "cwd"},
		{api.CreateSession{Cwd: dir, Transport: &api.Transport{ArgvPrefix: []string{"env", "a\x00b"}}}, "transport argvPrefix[1]"},
		{api.CreateSession{Cwd: dir, Transport: &api.Transport{ArgvPrefix: []string{"env"}, Python: "py\x00"}}, "transport python"},
		{api.CreateSession{Cwd: dir, Transport: &api.Transport{ArgvPrefix: []string{"env"}, PathMap: []api.Mount{{Sandbox: "/w", Host: dir + "\x00"}}}}, "transport pathMap[0].host"},
		{api.CreateSession{Cwd: dir, Transport: &api.Transport{Docker: &api.Docker{Image: "i\x00"}}}, "transport docker.image"},
	} {
		_, err := r.c.CreateSession(ctx, tc.req, client.CreateOptions{})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != api.CodeInvalid || !strings.Contains(ae.Message, tc.field) {
			t.Errorf("%s with a NUL: %v, want 400 invalid naming it", tc.field, err)
		}
	}
	if l, err := r.c.Sessions(ctx); err != nil || len(l) != 0 {
		t.Fatalf("sessions after refused creates: %v %v", l, err)
	}
}

// TestTooLargeBodiesAre413: a body over its route's limit is 413 too_large naming the
// limit, and so is a cell whose execute frame would be over the protocol's line limit
// (protocol.MaxLine) though its body is within the route's; neither starts a job.
func TestTooLargeBodiesAre413(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	cell := func(codeLen int) []byte {
		return fmt.Appendf(nil, `{"budget_ms":2000,"code":"%s"}`, strings.Repeat("x", codeLen))
	}
	for _, tc := range []struct {
		name, target string
		body         []byte
		limit        string
	}{
		{"a 2 MiB create", "/sessions", fmt.Appendf(nil, `{"cwd":"%s"}`, strings.Repeat("x", 2<<20)), "1048576"},
		{"a 2 MiB job", "/sessions/" + s.ID + "/jobs", fmt.Appendf(nil, `{"command":"%s"}`, strings.Repeat("x", 2<<20)), "1048576"},
		{"a 60 MiB cell", "/sessions/" + s.ID + "/cells", cell(60 << 20), ""},
		{"a cell whose frame is just over the line limit", "/sessions/" + s.ID + "/cells", cell(protocol.MaxLine - 30), ""},
	} {
		c := dialRaw(t, r.socket)
		errc := make(chan error, 1)
		go func() { // the daemon may answer before it has read the whole body
			_, err := c.Write(fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: kennel\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tc.target, len(tc.body), tc.body))
			errc <- err
		}()
		resp, body := c.reply(t, "POST")
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: status %d %.300q, want 413", tc.name, resp.StatusCode, body)
			continue
		}
		if e := apiError(t, resp, body); e.Code != api.CodeTooLarge || !strings.Contains(e.Message, tc.limit) {
			t.Errorf("%s: %s %q, want too_large naming the limit", tc.name, e.Code, e.Message)
		}
		_ = c.Close()
		<-errc
	}
	jl, err := r.c.Jobs(ctx, s.ID)
	if err != nil || len(jl) != 0 {
		t.Fatalf("jobs after refused bodies: %+v %v", jl, err)
	}
}

package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
)

// server is a real net/http server on a unix socket, counting the connections it
// accepted.
type server struct {
	socket string
	hs     *http.Server
	conns  atomic.Int64
	done   chan struct{}
}

// serveUnix serves h on a fresh unix socket until the test ends.
func serveUnix(t *testing.T, h http.Handler) *server {
	t.Helper()
	dir, err := os.MkdirTemp("", "kc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return serveAt(t, filepath.Join(dir, "s.sock"), h)
}

func serveAt(t *testing.T, socket string, h http.Handler) *server {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{socket: socket, done: make(chan struct{})}
	s.hs = &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}}
	go func() {
		defer close(s.done)
		_ = s.hs.Serve(l)
	}()
	t.Cleanup(s.stop)
	return s
}

// stop closes the server and its connections and waits for its end.
func (s *server) stop() {
	_ = s.hs.Close()
	<-s.done
}

func jsonHandler(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body+"\n")
	}
}

func TestCallsReuseOneConnection(t *testing.T) {
	var got []string
	s := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Content-Type")+" "+string(b))
		_, _ = io.WriteString(w, `{"state":"settled","job":"j1","output":{"text":"hi"}}`+"\n")
	}))
	c := New(s.socket)
	defer c.Close()
	ctx := context.Background()
	for range 3 {
		rep, err := c.RunCell(ctx, "s 1", api.RunCell{Code: "1"})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Job != "j1" || rep.Output.Text != "hi" {
			t.Fatalf("reply %+v", rep)
		}
	}
	if _, err := c.Jobs(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if n := s.conns.Load(); n != 1 {
		t.Fatalf("%d connections for 4 calls, want 1 kept alive", n)
	}
	if want := `POST /sessions/s%201/cells application/json {"code":"1"}`; got[0] != want {
		t.Fatalf("request %q, want %q", got[0], want)
	}
	if want := `GET /sessions/s/jobs  `; got[3] != want {
		t.Fatalf("request %q, want %q", got[3], want)
	}
}

func TestConnectionCloseIsNotReused(t *testing.T) {
	s := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, `{"jobs":[]}`)
	}))
	c := New(s.socket)
	defer c.Close()
	for range 2 {
		if _, err := c.Jobs(context.Background(), "s"); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the reply closes each)", n)
	}
}

// TestDaemonRestartIsRetried: a kept-alive connection to a daemon that went away is
// found dead when the next request goes out; the request is sent again on a new
// connection to the new daemon, for a POST too (nothing of it reached the daemon).
func TestDaemonRestartIsRetried(t *testing.T) {
	s := serveUnix(t, jsonHandler(`{"state":"settled","job":"j1"}`))
	c := New(s.socket)
	defer c.Close()
	ctx := context.Background()
	if _, err := c.RunCell(ctx, "s", api.RunCell{Code: "1"}); err != nil {
		t.Fatal(err)
	}
	s.stop()
	_ = os.Remove(s.socket)
	s2 := serveAt(t, s.socket, jsonHandler(`{"state":"settled","job":"j2"}`))
	rep, err := c.RunCell(ctx, "s", api.RunCell{Code: "1"})
	if err != nil {
		t.Fatalf("call after a restart: %v", err)
	}
	if rep.Job != "j2" || s2.conns.Load() != 1 {
		t.Fatalf("reply %+v from %d new connections", rep, s2.conns.Load())
	}
}

func TestNoDaemon(t *testing.T) {
	c := New(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := c.Sessions(context.Background()); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("err %v, want ErrNoDaemon", err)
	}
}

// TestContextEndsCall: a call whose context ends while the daemon has not answered
// returns the context's cause at once, and its connection is not reused.
func TestContextEndsCall(t *testing.T) {
	release := make(chan struct{})
	s := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer close(release)
	c := New(s.socket)
	defer c.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("the user gave up")
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	err := c.request(ctx, "GET", "/slow", nil, nil, nil, http.StatusOK)
	if !errors.Is(err, cause) {
		t.Fatalf("err %v, want the context's cause", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the call returned after %v", d)
	}
	if err := c.request(context.Background(), "GET", "/fast", nil, nil, nil, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the cancelled one is closed)", n)
	}
}

// TestStreamReadsAsItArrives: a streamed reply's events reach the caller while the
// daemon still holds the rest back.
func TestStreamReadsAsItArrives(t *testing.T) {
	next := make(chan struct{})
	s := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != api.MediaNDJSON {
			http.Error(w, "want ndjson", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", api.MediaNDJSON)
		for i := range 3 {
			fmt.Fprintf(w, `{"type":"stream","name":"stdout","text":"%d"}`+"\n", i)
			w.(http.Flusher).Flush()
			<-next
		}
		_, _ = io.WriteString(w, `{"type":"result","result":{"state":"settled","job":"j1"}}`+"\n")
	}))
	c := New(s.socket)
	defer c.Close()
	var texts []string
	rep, err := c.StreamCell(context.Background(), "s", api.RunCell{Code: "1"}, func(ev api.Event) {
		texts = append(texts, ev.Text)
		next <- struct{}{} // the daemon writes the next event only now
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Job != "j1" || strings.Join(texts, ",") != "0,1,2" {
		t.Fatalf("reply %+v after %q", rep, texts)
	}
	if _, err := c.Jobs(context.Background(), "s"); err == nil || s.conns.Load() != 1 {
		// The stream ended with its last chunk, so the connection was kept; the daemon
		// answers this path with an error, decoded as one.
		t.Fatalf("call after the stream: %v, %d connections", err, s.conns.Load())
	}
}

// TestBadHeaderSendsNothing: a header value with a line break is refused before any
// byte is sent.
func TestBadHeaderSendsNothing(t *testing.T) {
	s := serveUnix(t, jsonHandler(`{}`))
	c := New(s.socket)
	defer c.Close()
	_, err := c.CreateSession(context.Background(), api.CreateSession{Cwd: "/"}, CreateOptions{IdempotencyKey: "k\r\nX-Evil: 1"})
	if err == nil || !strings.Contains(err.Error(), "control character") {
		t.Fatalf("err %v, want a refused header", err)
	}
	if n := s.conns.Load(); n != 0 {
		t.Fatalf("%d connections, want none", n)
	}
}

// TestEarlyReplyIsTheAnswer: a daemon that answers without reading a large body, and
// closes, is heard: the call returns its reply, not the failed write.
func TestEarlyReplyIsTheAnswer(t *testing.T) {
	s := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = io.WriteString(w, `{"error":{"code":"invalid","message":"too large"}}`)
	}))
	c := New(s.socket)
	defer c.Close()
	_, err := c.RunCell(context.Background(), "s", api.RunCell{Code: strings.Repeat("x", 8<<20)})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge || ae.Code != api.CodeInvalid {
		t.Fatalf("err %v, want the daemon's 413", err)
	}
}

// TestRawReplyParsing: replies are parsed as HTTP/1.1 whatever their framing (chunked
// or with a length), and both keep their connection.
func TestRawReplyParsing(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "raw.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, piece := range []string{`{"jo`, `bs":[{"id":`, `"j1"}]}`} {
		chunked += fmt.Sprintf("%x\r\n%s\r\n", len(piece), piece)
	}
	replies := []string{
		chunked + "0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"jobs\":[]}",
	}
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		for _, rep := range replies {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = io.WriteString(nc, rep)
		}
	}()
	c := New(socket)
	defer c.Close()
	jobs, err := c.Jobs(context.Background(), "s")
	if err != nil || len(jobs) != 1 || jobs[0].ID != "j1" {
		t.Fatalf("chunked reply: %+v, %v", jobs, err)
	}
	jobs, err = c.Jobs(context.Background(), "s")
	if err != nil || len(jobs) != 0 {
		t.Fatalf("reply with a length, on the same connection: %+v, %v", jobs, err)
	}
}

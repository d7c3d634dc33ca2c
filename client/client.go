package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/kennel-dev/kennel/api"
)

// ErrNoDaemon: nothing answers on the socket (no daemon runs there).
var ErrNoDaemon = errors.New("no kennel daemon answers")

// Client talks to one daemon. It is safe for concurrent use and keeps connections alive
// between calls (at most 64 idle, each for at most 90 s). Each call writes its HTTP/1.1
// request and reads the reply on the caller's goroutine, over a connection of its own.
type Client struct {
	tr *transport
}

// New returns a client of the daemon at socket. It connects on the first call.
func New(socket string) *Client {
	return &Client{tr: &transport{socket: socket}}
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.tr.closeIdle() }

// send sends an API request with in, when non-nil, as its JSON body, and returns the
// reply, whose Body the caller must close; a reply of another status than want is read
// and returned as an *api.Error.
func (c *Client) send(ctx context.Context, method, path string, hdr http.Header, in any, want ...int) (*http.Response, error) {
	req := &request{method: method, target: path, header: hdr}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		req.body = b
	}
	resp, err := c.tr.do(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if !slices.Contains(want, resp.StatusCode) {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// request makes an API request (send); out, when non-nil, receives the JSON body.
func (c *Client) request(ctx context.Context, method, path string, hdr http.Header, in, out any, want ...int) error {
	resp, err := c.send(ctx, method, path, hdr, in, want...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if s, ok := out.(*string); ok {
		b, err := io.ReadAll(resp.Body)
		*s = string(b)
		return err
	}
	if err := decodeBody(resp, out); err != nil {
		return fmt.Errorf("%s %s: decode reply: %w", method, path, err)
	}
	return nil
}

// call makes an API request (request) and returns its JSON reply as a T.
func call[T any](ctx context.Context, c *Client, method, path string, hdr http.Header, in any, want ...int) (*T, error) {
	var out T
	if err := c.request(ctx, method, path, hdr, in, &out, want...); err != nil {
		return nil, err
	}
	return &out, nil
}

// maxWhole is the largest reply body decodeBody reads whole before decoding it; a
// longer one, or one of unknown length, is decoded as it streams in.
const maxWhole = 256 << 10

// decodeBody decodes resp's JSON body into out, and reads the body to its end, so that
// its connection is kept.
func decodeBody(resp *http.Response, out any) error {
	if n := resp.ContentLength; n >= 0 && n <= maxWhole {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return err
		}
		if err := json.Unmarshal(b, out); err != nil {
			return err
		}
	} else if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return err
	}
	// Reach the body's end (the encoder's newline, at most), so the connection is kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 512))
	return nil
}

// decodeError reads an error reply as an *api.Error.
func decodeError(resp *http.Response) error {
	var eb api.ErrorBody
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" {
		return &api.Error{Status: resp.StatusCode, Code: api.CodeInternal, Message: fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, b)}
	}
	e := eb.Error
	e.Status = resp.StatusCode
	return &e
}

// CreateOptions are the per-call options of CreateSession.
type CreateOptions struct {
	// IdempotencyKey, when set, makes a retried create return the session the first
	// create with the same key made.
	IdempotencyKey string
}

// CreateSession starts a session.
func (c *Client) CreateSession(ctx context.Context, req api.CreateSession, opts CreateOptions) (*api.Session, error) {
	var hdr http.Header
	if opts.IdempotencyKey != "" {
		hdr = http.Header{api.HeaderIdempotencyKey: {opts.IdempotencyKey}}
	}
	return call[api.Session](ctx, c, "POST", "/sessions", hdr, req, http.StatusCreated, http.StatusOK)
}

// Sessions lists the daemon's sessions.
func (c *Client) Sessions(ctx context.Context) ([]api.Session, error) {
	var l api.SessionList
	if err := c.request(ctx, "GET", "/sessions", nil, nil, &l, http.StatusOK); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// Session returns one session and its kernel observation (starting no kernel).
func (c *Client) Session(ctx context.Context, id string) (*api.Session, error) {
	return call[api.Session](ctx, c, "GET", "/sessions/"+url.PathEscape(id), nil, nil, http.StatusOK)
}

// DeleteSession ends a session.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.request(ctx, "DELETE", "/sessions/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent)
}

// RunCell runs a cell and returns its reply (settled or detached).
func (c *Client) RunCell(ctx context.Context, id string, req api.RunCell) (*api.CellReply, error) {
	return call[api.CellReply](ctx, c, "POST", "/sessions/"+url.PathEscape(id)+"/cells", nil, req, http.StatusOK)
}

// RunCellOnce is RunCell under an idempotency key: the cell runs at most once however
// often it is retried with key, across daemon restarts; a retry answers with the first
// run's reply (its job's wait while it runs), or with state "unknown" when the cell was
// sent to a kernel that is gone. A key is for one cell: another code under it is a
// conflict.
func (c *Client) RunCellOnce(ctx context.Context, id, key string, req api.RunCell) (*api.CellReply, error) {
	hdr := http.Header{api.HeaderIdempotencyKey: {key}}
	return call[api.CellReply](ctx, c, "POST", "/sessions/"+url.PathEscape(id)+"/cells", hdr, req, http.StatusOK)
}

// StreamCell runs a cell with its output streamed: each stream, display and dropped
// event goes to onEvent as it arrives (on the calling goroutine), and the final reply is
// returned.
func (c *Client) StreamCell(ctx context.Context, id string, req api.RunCell, onEvent func(api.Event)) (*api.CellReply, error) {
	path := "/sessions/" + url.PathEscape(id) + "/cells"
	resp, err := c.send(ctx, "POST", path, http.Header{"Accept": {api.MediaNDJSON}}, req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	var dec eventDecoder // stream events in one pass (events.go)
	for sc.Scan() {
		var ev api.Event
		if err := dec.decode(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("POST %s: bad event: %w", path, err)
		}
		switch ev.Type {
		case "result":
			if ev.Result == nil {
				return nil, fmt.Errorf("POST %s: result event without a result", path)
			}
			return ev.Result, nil
		case "error":
			if ev.Error == nil {
				return nil, fmt.Errorf("POST %s: error event without an error", path)
			}
			return nil, ev.Error
		default:
			if onEvent != nil {
				onEvent(ev)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	return nil, fmt.Errorf("POST %s: the stream ended without a result", path)
}

// RunJob starts a shell command as a job.
func (c *Client) RunJob(ctx context.Context, id, command string) (*api.Job, error) {
	return call[api.Job](ctx, c, "POST", "/sessions/"+url.PathEscape(id)+"/jobs", nil, api.RunJob{Command: command}, http.StatusCreated)
}

// Jobs lists a session's jobs.
func (c *Client) Jobs(ctx context.Context, id string) ([]api.Job, error) {
	var l api.JobList
	if err := c.request(ctx, "GET", "/sessions/"+url.PathEscape(id)+"/jobs", nil, nil, &l, http.StatusOK); err != nil {
		return nil, err
	}
	return l.Jobs, nil
}

// Output reads one page of a job's output: limit bytes from offset (at most 64 KiB; a
// page the retained output cannot answer whole is refused, with a read that works in
// the error's Use).
func (c *Client) Output(ctx context.Context, id, job string, offset, limit int64) (*api.OutputPage, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "limit": {strconv.FormatInt(limit, 10)}}
	path := "/sessions/" + url.PathEscape(id) + "/jobs/" + url.PathEscape(job) + "/output?" + q.Encode()
	return call[api.OutputPage](ctx, c, "GET", path, nil, nil, http.StatusOK)
}

// StopJob stops a job once and returns it ended; api.CodeUnconfirmed when its end was not
// confirmed in time (read the job before trying again).
func (c *Client) StopJob(ctx context.Context, id, job string) (*api.Job, error) {
	var r api.StopReply
	if err := c.request(ctx, "POST", "/sessions/"+url.PathEscape(id)+"/jobs/"+url.PathEscape(job)+"/stop", nil, nil, &r, http.StatusOK); err != nil {
		return nil, err
	}
	return &r.Job, nil
}

// CreateChild makes an isolated workspace of session id's directory and a child session
// in it.
func (c *Client) CreateChild(ctx context.Context, id string, req api.CreateChild) (*api.Child, error) {
	return call[api.Child](ctx, c, "POST", "/sessions/"+url.PathEscape(id)+"/children", nil, req, http.StatusCreated)
}

// HandBack ends child and brings its changes back into session id's directory.
func (c *Client) HandBack(ctx context.Context, id, child string) (*api.HandBack, error) {
	return call[api.HandBack](ctx, c, "POST", "/sessions/"+url.PathEscape(id)+"/children/"+url.PathEscape(child)+"/handback", nil, nil, http.StatusOK)
}

// Metrics returns the daemon's metrics in Prometheus text format.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var s string
	err := c.request(ctx, "GET", "/metrics", nil, nil, &s, http.StatusOK)
	return s, err
}

// Host returns the daemon's state of the ssh host target ([user@]host[:port]): its last
// probe's answer, api.HostProbing while a probe runs, api.HostUnknown when the daemon
// holds none. It never starts a probe.
func (c *Client) Host(ctx context.Context, target string) (*api.HostState, error) {
	return call[api.HostState](ctx, c, "GET", "/hosts?"+url.Values{"target": {target}}.Encode(), nil, nil, http.StatusOK)
}

// ProbeHost starts a probe of the ssh host target, or joins the one in flight, and
// returns at once with the host's state (api.HostProbing); WaitHost waits for the answer.
func (c *Client) ProbeHost(ctx context.Context, target string) (*api.HostState, error) {
	return call[api.HostState](ctx, c, "POST", "/hosts/"+url.PathEscape(target)+"/probe", nil, nil, http.StatusAccepted)
}

// DefaultHostPoll is WaitHost's interval between reads when none is given.
const DefaultHostPoll = 100 * time.Millisecond

// WaitHost reads the state of the ssh host target every poll (zero: DefaultHostPoll)
// until it is not api.HostProbing, and returns it: a probe's answer, or api.HostUnknown
// when the daemon holds none (no probe was started, or its record was dropped). It ends
// with ctx, returning the context's cause; the daemon bounds a probe in time itself.
func (c *Client) WaitHost(ctx context.Context, target string, poll time.Duration) (*api.HostState, error) {
	if poll <= 0 {
		poll = DefaultHostPoll
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		st, err := c.Host(ctx, target)
		if err != nil {
			return nil, err
		}
		if st.Status != api.HostProbing {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for host %s: %w", target, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

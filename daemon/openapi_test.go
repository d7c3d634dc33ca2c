package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/protocol"
)

// registerNDJSON teaches openapi3filter the streamed cell reply (application/x-ndjson):
// each line must be one value of the media type's schema (an Event); the last line is
// what the filter then validates again.
var registerNDJSON = sync.OnceFunc(func() {
	openapi3filter.RegisterBodyDecoder(api.MediaNDJSON, func(body io.Reader, _ http.Header, schema *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		sc := bufio.NewScanner(body)
		sc.Buffer(nil, 64<<20)
		var last any
		n := 0
		for sc.Scan() {
			var v any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			if err := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			last, n = v, n+1
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, errors.New("an empty stream")
		}
		return last, nil
	})
})

// validator drives the daemon over its socket and checks every request and reply
// against the OpenAPI document the daemon serves, with kin-openapi's openapi3filter.
type validator struct {
	hc       *http.Client
	doc      *openapi3.T
	router   routers.Router
	unrouted *openapi3.Responses // the document's x-kennel-unrouted replies

	mu   sync.Mutex
	seen map[string]bool // "operation status" of every reply seen
}

func newValidator(t *testing.T, socket string) *validator {
	t.Helper()
	registerNDJSON()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	t.Cleanup(hc.CloseIdleConnections)
	resp, err := hc.Get("http://kennel/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %v", resp.StatusCode, err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatalf("load the served document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the served document is not valid OpenAPI: %v", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := doc.Extensions["x-kennel-unrouted"].(map[string]any)
	if !ok || len(raw) == 0 {
		t.Fatalf("the document has no x-kennel-unrouted replies: %v", doc.Extensions)
	}
	var opts []openapi3.NewResponsesOption
	for status, v := range raw {
		ref, _ := v.(map[string]any)["$ref"].(string)
		name, ok := strings.CutPrefix(ref, "#/components/responses/")
		resp := doc.Components.Responses[name]
		var code int
		if _, err := fmt.Sscan(status, &code); err != nil || !ok || resp == nil {
			t.Fatalf("x-kennel-unrouted %s: %v does not name a component response", status, v)
		}
		opts = append(opts, openapi3.WithStatus(code, resp))
	}
	return &validator{hc: hc, doc: doc, router: router, unrouted: openapi3.NewResponses(opts...), seen: map[string]bool{}}
}

// exchange is one request, what the document says of it, and the reply's status.
type exchange struct {
	method, target string
	header         http.Header
	body           []byte // nil: none
	bodyReader     io.Reader
	valid          bool // the document accepts the request
	status         int
}

func (v *validator) newRequest(t *testing.T, ex exchange, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(ex.method, "http://kennel"+ex.target, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range ex.header {
		req.Header[k] = vs
	}
	if ex.body != nil || ex.bodyReader != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ex.body != nil {
		req.ContentLength = int64(len(ex.body))
	}
	return req
}

// do sends ex, checks the request against the document (it must be as valid as ex says),
// the status, and the reply against the document: a status the document does not list
// for the operation, or a body or header that does not match it, fails the test. It
// returns the reply's body.
func (v *validator) do(t *testing.T, ex exchange) []byte {
	t.Helper()
	name := fmt.Sprintf("%s %s %.80q", ex.method, ex.target, ex.body)
	if k := ex.header.Get(api.HeaderIdempotencyKey); k != "" {
		name += fmt.Sprintf(" (key %.20s)", k)
	}
	// The request, as the document sees it.
	vreq := v.newRequest(t, ex, bytes.NewReader(ex.body))
	route, params, rerr := v.router.FindRoute(vreq)
	if rerr == nil && !exactly(route.Path, params, vreq.URL.EscapedPath()) {
		rerr = fmt.Errorf("the router matched %s to %s loosely", vreq.URL.Path, route.Path)
	}
	var input *openapi3filter.RequestValidationInput
	var op string
	if rerr == nil {
		input = &openapi3filter.RequestValidationInput{
			Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		}
		op = route.Operation.OperationID
		switch {
		case ex.bodyReader != nil:
		case ex.body != nil && !json.Valid(ex.body):
			// application/json is one JSON text (the filter's decoder stops after one).
			rerr = errors.New("the body is not one JSON text")
		default:
			rerr = openapi3filter.ValidateRequest(context.Background(), input)
		}
	} else {
		// No route of the document: the reply must be one of x-kennel-unrouted.
		input = &openapi3filter.RequestValidationInput{
			Request: vreq,
			Route:   &routers.Route{Spec: v.doc, Path: ex.target, Method: ex.method, Operation: &openapi3.Operation{Responses: v.unrouted}},
		}
		op = "unrouted"
	}
	if (rerr == nil) != ex.valid {
		t.Errorf("%s: the document's verdict on the request: %v, want valid=%v", name, rerr, ex.valid)
	}
	// The request, sent.
	body := ex.bodyReader
	if body == nil && ex.body != nil {
		body = bytes.NewReader(ex.body)
	}
	req := v.newRequest(t, ex, body)
	resp, err := v.hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: reply body: %v", name, err)
	}
	if resp.StatusCode != ex.status {
		t.Errorf("%s: status %d %.300q, want %d", name, resp.StatusCode, b, ex.status)
	}
	if !ex.valid && resp.StatusCode < 400 {
		t.Errorf("%s: a request the document refuses was answered %d", name, resp.StatusCode)
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(b)), Options: &openapi3filter.Options{IncludeResponseStatus: true},
	})
	if err != nil {
		t.Errorf("%s: the reply (%d %.300q) is not in the document: %v", name, resp.StatusCode, b, err)
	}
	v.mu.Lock()
	v.seen[fmt.Sprintf("%s %d", op, resp.StatusCode)] = true
	v.mu.Unlock()
	return b
}

// exactly reports whether the path template, with params put in (path-escaped, as they
// are in path), is path: OpenAPI path templates match whole paths (the legacy router
// also takes a trailing slash).
func exactly(template string, params map[string]string, path string) bool {
	for k, v := range params {
		template = strings.ReplaceAll(template, "{"+k+"}", url.PathEscape(v))
	}
	return template == path
}

// decode unmarshals a reply body, failing the test on error.
func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T: %v: %.200q", v, err, b)
	}
	return v
}

// trickle is a body that never comes: it blocks until the test ends.
type trickle struct{ done <-chan struct{} }

func (tr trickle) Read([]byte) (int, error) {
	<-tr.done
	return 0, io.EOF
}

// TestEveryReplyIsInTheOpenAPIDocument drives every route of the real daemon (real
// local kernels on the real stub) with valid and invalid requests, and validates each
// request and reply against the document the daemon serves at GET /openapi.json: a
// status the document does not list for its operation, or a body that does not match
// the listed schema, fails the test.
func TestEveryReplyIsInTheOpenAPIDocument(t *testing.T) {
	r := serve(t, daemon.Options{StopWait: 300 * time.Millisecond})
	v := newValidator(t, r.socket)
	// A second daemon with a short body timeout, for the reply to a body that never comes.
	slow := newValidator(t, serve(t, daemon.Options{Timeouts: daemon.Timeouts{Body: 500 * time.Millisecond}}).socket)
	js := func(format string, a ...any) []byte { return fmt.Appendf(nil, format, a...) }
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "a.txt")
	big := strings.Repeat("x", 2<<20)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}

	// The document, the metrics, the empty list.
	v.do(t, exchange{method: "GET", target: "/openapi.json", valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: "/metrics", valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: "/sessions", valid: true, status: 200})

	// Creates: refused ones first, then one by key, repeated.
	for _, ex := range []exchange{
		{body: js(`{}`), valid: true, status: 400},
		{body: js(`{"cwd":""}`), valid: true, status: 400},
		{body: js(`{"cwd":"relative/dir"}`), valid: true, status: 400},
		{body: js(`{"cwd":%s}`, quote(filepath.Join(dir, "gone"))), valid: true, status: 400},
		{body: js(`{"cwd":%s}`, quote(file)), valid: true, status: 400},
		{body: js(`{"cwd":%s}`, quote(dir+"/\x00x")), valid: false, status: 400},
		{body: js(`{"cwd":%s,"x":1}`, quote(dir)), valid: false, status: 400},
		{body: js(`{"cwd":`), valid: false, status: 400},
		{body: js(`{"cwd":%s} {}`, quote(dir)), valid: false, status: 400},
		{body: js(`{"cwd":%s,"limits":{"keep":"middle"}}`, quote(dir)), valid: false, status: 400},
		{body: js(`{"cwd":%s,"transport":{}}`, quote(dir)), valid: true, status: 400},
		{body: js(`{"cwd":%s,"transport":{"argvPrefix":[]}}`, quote(dir)), valid: false, status: 400},
		{body: js(`{"cwd":%s,"transport":{"kind":"wrapped"}}`, quote(dir)), valid: false, status: 400},
		{body: js(`{"cwd":%s,"transport":{"argvPrefix":["env","a\u0000b"]}}`, quote(dir)), valid: false, status: 400},
		{body: js(`{"cwd":%s,"transport":{"docker":{"network":"host"}}}`, quote(dir)), valid: true, status: 400},
		{body: js(`{"cwd":%s,"transport":{"local":{},"docker":{}}}`, quote(dir)), valid: true, status: 400},
		{body: js(`{"cwd":%s,"transport":{"ssh":{"target":"h"}}}`, quote(dir)), valid: true, status: 400},
		{body: js(`{"cwd":%s}`, quote(big)), valid: true, status: 413},
		{body: js(`{"cwd":%s}`, quote(dir)), header: hdr(api.HeaderIdempotencyKey, strings.Repeat("k", 300)), valid: false, status: 400},
		// A kernel that cannot start: its wrapper exits at once.
		{body: js(`{"cwd":%s,"transport":{"argvPrefix":["false"]}}`, quote(dir)), valid: true, status: 503},
	} {
		ex.method, ex.target = "POST", "/sessions"
		v.do(t, ex)
	}
	s := decode[api.Session](t, v.do(t, exchange{method: "POST", target: "/sessions", body: js(`{"cwd":%s}`, quote(dir)), header: hdr(api.HeaderIdempotencyKey, "k1"), valid: true, status: 201}))
	v.do(t, exchange{method: "POST", target: "/sessions", body: js(`{"cwd":%s}`, quote(dir)), header: hdr(api.HeaderIdempotencyKey, "k1"), valid: true, status: 200})
	// A body that never arrives is cut off (408); the document says so.
	done := make(chan struct{})
	defer close(done)
	slow.do(t, exchange{method: "POST", target: "/sessions", bodyReader: trickle{done}, valid: true, status: 408})

	sid := "/sessions/" + s.ID
	v.do(t, exchange{method: "GET", target: sid, valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: "/sessions/nosuch", valid: true, status: 404})
	v.do(t, exchange{method: "GET", target: "/sessions", valid: true, status: 200})

	// Cells: settled, failed, streamed, detached; refused ones.
	v.do(t, exchange{method: "POST", target: sid + "/cells", body: js(`{"code":"print('hi')\n6*7"}`), valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/cells", body: js(`{"code":"1/0"}`), valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/cells", body: js(`{}`), valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/kernel/upgrade", valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: "/sessions/nope/kernel/upgrade", valid: true, status: 404})
	v.do(t, exchange{method: "POST", target: sid + "/cells", header: hdr("Accept", api.MediaNDJSON),
		body: js(`{"code":"import sys\nprint(1, flush=True)\nprint(2, file=sys.stderr)\n'x'"}`), valid: true, status: 200})
	det := decode[api.CellReply](t, v.do(t, exchange{method: "POST", target: sid + "/cells",
		body: js(`{"code":"import time\nprint('a'*1000, flush=True)\ntime.sleep(60)","budget_ms":200}`), valid: true, status: 200}))
	if det.State != "backgrounded" {
		t.Fatalf("the detached cell: %+v", det)
	}
	for _, ex := range []exchange{
		{target: sid + "/cells", body: js(`{"code":`), valid: false, status: 400},
		{target: sid + "/cells", body: js(`{"code":1}`), valid: false, status: 400},
		{target: sid + "/cells", body: js(`{"code":"1","extra":true}`), valid: false, status: 400},
		{target: "/sessions/nosuch/cells", body: js(`{"code":"1"}`), valid: true, status: 404},
		{target: sid + "/cells", body: js(`{"code":"%s"}`, strings.Repeat("x", protocol.MaxLine-30)), valid: true, status: 413},
		{target: sid + "/cells", body: js(`{"code":"%s"}`, strings.Repeat("x", 40<<20)), valid: true, status: 413},
	} {
		ex.method = "POST"
		v.do(t, ex)
	}

	// Jobs: a shell job, its list, its output pages, its stop; refused ones.
	job := decode[api.Job](t, v.do(t, exchange{method: "POST", target: sid + "/jobs", body: js(`{"command":"echo hi"}`), valid: true, status: 201}))
	for _, ex := range []exchange{
		{target: sid + "/jobs", body: js(`{"command":"a\u0000b"}`), valid: true, status: 400},
		{target: sid + "/jobs", body: js(`{"command":[]}`), valid: false, status: 400},
		{target: sid + "/jobs", body: js(`{"command":%s}`, quote(big)), valid: true, status: 413},
		{target: "/sessions/nosuch/jobs", body: js(`{"command":"true"}`), valid: true, status: 404},
	} {
		ex.method = "POST"
		v.do(t, ex)
	}
	v.do(t, exchange{method: "GET", target: sid + "/jobs", valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: "/sessions/nosuch/jobs", valid: true, status: 404})
	out := sid + "/jobs/" + det.Job + "/output"
	v.do(t, exchange{method: "GET", target: out, valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: out + "?offset=10&limit=100", valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: sid + "/jobs/" + job.ID + "/output", valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: out + "?offset=-1", valid: false, status: 400})
	v.do(t, exchange{method: "GET", target: out + "?limit=z", valid: false, status: 400})
	v.do(t, exchange{method: "GET", target: out + "?limit=1048576", valid: false, status: 400})
	v.do(t, exchange{method: "GET", target: sid + "/jobs/j999/output", valid: true, status: 404})
	v.do(t, exchange{method: "GET", target: sid + "/jobs/nonsense/output", valid: false, status: 404})
	// A job that ignores TERM: the stop's wait (300 ms) ends before the controller's
	// KILL (after 2 s), so the first stop is unconfirmed (504), a later one confirmed.
	stubborn := decode[api.Job](t, v.do(t, exchange{method: "POST", target: sid + "/jobs", body: js(`{"command":"trap '' TERM; sleep 30"}`), valid: true, status: 201}))
	time.Sleep(300 * time.Millisecond) // the shell has set its trap
	v.do(t, exchange{method: "POST", target: sid + "/jobs/" + stubborn.ID + "/stop", valid: true, status: 504})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := v.hc.Get("http://kennel" + sid + "/jobs")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if jl := decode[api.JobList](t, b); jl.Jobs[len(jl.Jobs)-1].State == "ended" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stubborn job did not end")
		}
		time.Sleep(50 * time.Millisecond)
	}
	v.do(t, exchange{method: "POST", target: sid + "/jobs/" + stubborn.ID + "/stop", valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/jobs/" + det.Job + "/stop", valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/jobs/j999/stop", valid: true, status: 404})
	v.do(t, exchange{method: "POST", target: sid + "/jobs/nonsense/stop", valid: false, status: 404})

	// Children: one, its twin (409), a bad id, its hand-back, a missing child.
	child := decode[api.Child](t, v.do(t, exchange{method: "POST", target: sid + "/children", body: js(`{"id":"kid"}`), valid: true, status: 201}))
	v.do(t, exchange{method: "POST", target: sid + "/children", body: js(`{"id":"kid"}`), valid: true, status: 409})
	v.do(t, exchange{method: "POST", target: sid + "/children", body: js(`{"id":"../x"}`), valid: false, status: 400})
	v.do(t, exchange{method: "POST", target: sid + "/children", body: js(`{"id":"k","limits":{"bytes":-1}}`), valid: true, status: 400})
	v.do(t, exchange{method: "POST", target: "/sessions/nosuch/children", body: js(`{}`), valid: true, status: 404})
	v.do(t, exchange{method: "POST", target: "/sessions/" + child.Session.ID + "/cells", body: js(`{"code":"open('a.txt','w').write('child\\n')"}`), valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/children/" + child.Session.ID + "/handback", valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/children/nochild/handback", valid: true, status: 404})
	v.do(t, exchange{method: "POST", target: "/sessions/nosuch/children/nochild/handback", valid: true, status: 404})

	// Hosts: reads that never probe (unknown), a probe of a port nobody listens on (202,
	// then unreachable), refused targets and queries. daemon/hosts_test.go drives the
	// answers of a real sshd through the same validator.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	v.do(t, exchange{method: "GET", target: "/hosts?target=nowhere.invalid", valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: "/hosts/root@" + closed + "/probe", body: js(`{}`), valid: true, status: 202})
	for deadline := time.Now().Add(40 * time.Second); ; {
		st := decode[api.HostState](t, v.do(t, exchange{method: "GET", target: "/hosts?target=root@" + closed, valid: true, status: 200}))
		if st.Status == api.HostUnreachable {
			break
		}
		if st.Status != api.HostProbing || time.Now().After(deadline) {
			t.Fatalf("the probe of a closed port: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, ex := range []exchange{
		{method: "GET", target: "/hosts", valid: false, status: 400},
		{method: "GET", target: "/hosts?target=", valid: false, status: 400},
		{method: "GET", target: "/hosts?target=-oProxyCommand%3Dx", valid: true, status: 400},
		{method: "GET", target: "/hosts?target=a%20b", valid: true, status: 400},
		{method: "GET", target: "/hosts?target=a&target=b", valid: true, status: 400},
		{method: "GET", target: "/hosts?target=a;b", valid: false, status: 400},
		{method: "POST", target: "/hosts/-oProxyCommand=x/probe", valid: true, status: 400},
		{method: "POST", target: "/hosts/root@/probe", valid: true, status: 400},
	} {
		v.do(t, ex)
	}

	// Unrouted: unknown paths, wrong methods, paths ServeMux would redirect.
	for _, ex := range []exchange{
		{method: "DELETE", target: "/hosts", status: 405},
		{method: "POST", target: "/hosts", body: js(`{}`), status: 405},
		{method: "GET", target: "/hosts/h/probe", status: 405},
		{method: "PUT", target: "/hosts/h/probe", body: js(`{}`), status: 405},
		{method: "GET", target: "/hosts/h", status: 404},
		{method: "GET", target: "/nope", status: 404},
		{method: "GET", target: "/sessions/", status: 404},
		{method: "GET", target: "/sessions/x/../y", status: 404},
		{method: "PUT", target: "/sessions", body: js(`{}`), status: 405},
		{method: "PATCH", target: sid, body: js(`{}`), status: 405},
		{method: "GET", target: sid + "/cells", status: 405},
		{method: "DELETE", target: "/openapi.json", status: 405},
		{method: "HEAD", target: "/sessions", status: 405},
	} {
		v.do(t, ex)
	}

	// The end: the session deleted, then its key's session is gone (404), the metrics.
	v.do(t, exchange{method: "DELETE", target: sid, valid: true, status: 204})
	v.do(t, exchange{method: "DELETE", target: sid, valid: true, status: 404})
	v.do(t, exchange{method: "POST", target: sid + "/cells", body: js(`{"code":"1"}`), valid: true, status: 404})
	v.do(t, exchange{method: "POST", target: "/sessions", body: js(`{"cwd":%s}`, quote(dir)), header: hdr(api.HeaderIdempotencyKey, "k1"), valid: true, status: 404})
	v.do(t, exchange{method: "GET", target: "/metrics", valid: true, status: 200})

	var seen []string
	for _, v := range []*validator{v, slow} {
		for k := range v.seen {
			seen = append(seen, k)
		}
	}
	sort.Strings(seen)
	t.Logf("replies validated, by operation and status: %s", strings.Join(seen, ", "))
}

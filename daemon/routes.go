package daemon

import (
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/kennel-dev/kennel/api"
)

// route is one served route: the OpenAPI document lists exactly these.
type route struct {
	method, pattern string
	handler         http.HandlerFunc
}

// routes lists every route of the API.
func (s *Server) routes() []route {
	return []route{
		{"POST", "/sessions", s.handleCreate},
		{"GET", "/sessions", s.handleList},
		{"GET", "/sessions/{id}", s.inSession(s.handleGet)},
		{"DELETE", "/sessions/{id}", s.handleDelete},
		{"POST", "/sessions/{id}/cells", s.inSession(s.handleCell)},
		{"GET", "/sessions/{id}/cells/{cell}", s.inSession(s.handleReadCell)},
		{"GET", "/sessions/{id}/events", s.inSession(s.handleEvents)},
		{"POST", "/sessions/{id}/kernel/upgrade", s.inSession(s.handleUpgrade)},
		{"GET", "/sessions/{id}/functions", s.inSession(s.handleFunctions)},
		{"POST", "/sessions/{id}/functions/{name}", s.inSession(s.handleCall)},
		{"GET", "/sessions/{id}/jobs", s.inSession(s.handleJobs)},
		{"POST", "/sessions/{id}/jobs", s.inSession(s.handleRunJob)},
		{"GET", "/sessions/{id}/jobs/{job}/output", s.inSession(s.handleOutput)},
		{"POST", "/sessions/{id}/jobs/{job}/stop", s.inSession(s.handleStop)},
		{"POST", "/sessions/{id}/children", s.inSession(s.handleChild)},
		{"POST", "/sessions/{id}/children/{child}/handback", s.inSession(s.handleHandBack)},
		{"GET", "/hosts", s.hosts.handleGet},
		{"POST", "/hosts/{host}/probe", s.hosts.handleProbe},
		{"GET", "/metrics", s.handleMetrics},
		{"GET", "/openapi.json", s.handleOpenAPI},
	}
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(api.OpenAPI)
}

// router serves a route table on a ServeMux and answers every request no route takes
// with the API's error body, where ServeMux would answer plain text or redirect:
//
//   - a path no route has is 404 no_route, and so is a path not in canonical form (with
//     "." or ".." segments, or "//"), which ServeMux would redirect: the API has no
//     redirects;
//   - a path whose routes do not take the method is 405 method_not_allowed, with Allow
//     listing the methods they take. A route takes only its own method: HEAD is not
//     served where GET is.
//
// A request a route takes is matched once: each route's handler is registered behind a
// check of its own method (ServeMux gives a GET route HEAD requests too), and a pattern
// of every method on "/", the least specific, takes what no route does. Only such a miss
// looks further, on a second ServeMux of the routes alone, for the methods the path's
// routes take.
type router struct {
	mux     *http.ServeMux // the routes behind their method checks, and the miss handler on "/"
	probe   *http.ServeMux // the routes alone: which routes take a missed path
	methods []string       // the route table's methods, sorted, without repeats
}

// newRouter registers rs on a new ServeMux.
func newRouter(rs []route) *router {
	rt := &router{mux: http.NewServeMux(), probe: http.NewServeMux()}
	for _, r := range rs {
		pattern := r.method + " " + r.pattern
		rt.probe.HandleFunc(pattern, r.handler)
		rt.mux.HandleFunc(pattern, routeOf(r.method, r.handler, rt.miss))
		rt.methods = append(rt.methods, r.method)
	}
	rt.mux.HandleFunc("/", rt.miss)
	slices.Sort(rt.methods)
	rt.methods = slices.Compact(rt.methods)
	return rt
}

// routeOf is h behind a check that the request's method is method (otherwise miss).
func routeOf(method string, h, miss http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			miss(w, r)
			return
		}
		h(w, r)
	}
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.EscapedPath(); !canonical(p) {
		writeError(w, &api.Error{Status: http.StatusNotFound, Code: api.CodeNoRoute, Message: fmt.Sprintf("no route for %s %q: the path is not in canonical form", r.Method, p)})
		return
	}
	rt.mux.ServeHTTP(w, r)
}

// miss answers a canonical request no route takes: 405 with Allow when routes of other
// methods take its path, else 404.
func (rt *router) miss(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range rt.methods {
		if rt.takes(r, m) {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, &api.Error{Status: http.StatusNotFound, Code: api.CodeNoRoute, Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.EscapedPath())})
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, &api.Error{Status: http.StatusMethodNotAllowed, Code: api.CodeMethodNotAllowed, Message: fmt.Sprintf("no route for %s %s: its routes take %s", r.Method, r.URL.EscapedPath(), strings.Join(allow, ", "))})
}

// takes reports whether a route of method takes r's path: the routes' ServeMux matches
// it to a pattern of that very method (it matches HEAD to a GET pattern too).
func (rt *router) takes(r *http.Request, method string) bool {
	if method != r.Method {
		probe := new(http.Request)
		*probe = *r
		probe.Method = method
		r = probe
	}
	_, pattern := rt.probe.Handler(r)
	m, _, ok := strings.Cut(pattern, " ")
	return ok && m == method
}

// canonical reports whether p is a path ServeMux serves as it is: absolute, with no ".",
// ".." or empty segment (it redirects any other to its cleaned form).
func canonical(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

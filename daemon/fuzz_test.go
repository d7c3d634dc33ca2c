package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
)

// FuzzAPIRequest sends arbitrary requests to the API (with a setup that starts no
// kernel): no request panics the daemon or gets a 5xx other than the setup's 503, and
// every error reply, the router's 404 and 405 included, is an API error body with a code.
func FuzzAPIRequest(f *testing.F) {
	srv, err := daemon.New(daemon.Options{
		Socket: "/nonexistent/k.sock", StateDir: filepath.Join(f.TempDir(), "state"),
		Assemble: func(context.Context, *sessionspec.Transport, string) (*launch.Parts, error) {
			return nil, fmt.Errorf("no kernels in this test: %w", transports.ErrUnavailable)
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	for _, seed := range []struct{ method, path, body string }{
		{"POST", "/sessions", `{"cwd":"/tmp"}`},
		{"POST", "/sessions", `{"cwd":""}`},
		{"POST", "/sessions", `{"cwd":"/tmp","limits":{"keep":"middle"}}`},
		{"POST", "/sessions", `{"cwd":"/tmp","transport":{"argvPrefix":[]}}`},
		{"POST", "/sessions", `{"cwd":"/tmp","transport":{"docker":{"memory":"lots"},"ssh":{}}}`},
		{"POST", "/sessions", `{"transport":{"ssh":{"target":"h","dir":"/srv"}}}`},
		{"POST", "/sessions", `{"cwd":1}`},
		{"POST", "/sessions", `{} {}`},
		{"GET", "/sessions/x", ""},
		{"POST", "/sessions/x/cells", `{"code":"1","budget_ms":-5}`},
		{"GET", "/sessions/x/jobs/j1/output?offset=-1&limit=z", ""},
		{"POST", "/sessions/x/jobs/j0/stop", ""},
		{"POST", "/sessions/x/children/y/handback", ""},
		{"DELETE", "/sessions/%2e%2e", ""},
		{"POST", "/sessions", "{\"cwd\":\"/tmp/\\u0000\"}"},
		{"POST", "/sessions", `{"cwd":"/` + strings.Repeat("x", 5000) + `"}`},
		{"POST", "/sessions", `{"cwd":"/tmp","transport":{"argvPrefix":["a\u0000"]}}`},
		{"POST", "/sessions", `{"cwd":"/tmp"} ]`},
		{"PUT", "/sessions", ""},
		{"HEAD", "/sessions", ""},
		{"GET", "/nope", ""},
		{"GET", "/sessions/x/../y", ""},
	} {
		f.Add(seed.method, seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, method, path, body string) {
		if !strings.HasPrefix(path, "/") || method == "" || strings.ContainsAny(method, " \t\r\n") {
			return
		}
		req, err := http.NewRequest(method, "http://kennel"+path, strings.NewReader(body))
		if err != nil || path == "/metrics" {
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s %q: status %d: %s", method, path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var eb api.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" {
				t.Fatalf("%s %s: error reply without an API error: %q", method, path, rec.Body)
			}
		}
	})
}

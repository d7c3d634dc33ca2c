package daemon

import (
	"net/http"

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
		{"GET", "/sessions/{id}", s.handleGet},
		{"DELETE", "/sessions/{id}", s.handleDelete},
		{"POST", "/sessions/{id}/cells", s.handleCell},
		{"GET", "/sessions/{id}/jobs", s.handleJobs},
		{"POST", "/sessions/{id}/jobs", s.handleRunJob},
		{"GET", "/sessions/{id}/jobs/{job}/output", s.handleOutput},
		{"POST", "/sessions/{id}/jobs/{job}/stop", s.handleStop},
		{"POST", "/sessions/{id}/children", s.handleChild},
		{"POST", "/sessions/{id}/children/{child}/handback", s.handleHandBack},
		{"GET", "/metrics", s.handleMetrics},
		{"GET", "/openapi.json", s.handleOpenAPI},
	}
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(api.OpenAPI)
}

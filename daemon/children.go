package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/workspaces"
)

func (s *Server) handleChild(w http.ResponseWriter, r *http.Request, parent *entry) {
	var req api.CreateChild
	if err := readJSON(w, r, 1<<20, &req); err != nil {
		writeError(w, err)
		return
	}
	if parent.remote {
		writeError(w, fmt.Errorf("session %s: %w: its files are on its ssh host; a child workspace is a copy on this machine", parent.id, errConflict))
		return
	}
	ctx := context.WithoutCancel(r.Context())
	ws, err := workspaces.Create(ctx, parent.cwd, workspaces.CreateOptions{State: s.opts.StateDir, ID: req.ID, Logger: s.log})
	if err != nil {
		writeError(w, err)
		return
	}
	creq := api.CreateSession{Cwd: ws.Path(), Transport: parent.req.Transport, Limits: cmp.Or(req.Limits, parent.req.Limits)}
	e, err := s.startSession(ctx, creq, parent.spec, parent.id, ws.Dir)
	if err != nil {
		_ = os.RemoveAll(ws.Dir)
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.Child{
		Session: s.describe(e), WorkspaceID: ws.ID, WorkspaceDir: ws.Dir, Files: ws.Files,
	})
}

func (s *Server) handleHandBack(w http.ResponseWriter, r *http.Request, parent *entry) {
	cid := r.PathValue("child")
	child, ok := s.reg.get(cid)
	if !ok || child.parent != parent.id {
		writeError(w, fmt.Errorf("child %q of session %s: %w", cid, parent.id, errNotFound))
		return
	}
	ctx := context.WithoutCancel(r.Context())
	out, err := workspaces.HandBack(ctx, child.wsDir, workspaces.HandBackOptions{
		Stop: func(ctx context.Context) error {
			if e, ok := s.reg.take(child.id); ok {
				s.endSession(ctx, e)
			}
			return nil
		},
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if !out.Repeat {
		s.metrics.conflicts.Add(float64(len(out.Conflicts)))
	}
	hb := api.HandBack{
		ID: out.ID, Parent: out.Parent, Unchanged: out.Unchanged, Taken: nonNil(out.Taken), Removed: nonNil(out.Removed),
		Conflicts: []api.Conflict{}, Repeat: out.Repeat,
	}
	for _, c := range out.Conflicts {
		hb.Conflicts = append(hb.Conflicts, api.Conflict{Path: c.Path, Reason: string(c.Reason), Saved: c.Saved})
	}
	writeJSON(w, http.StatusOK, hb)
}

// nonNil is s, or an empty list for nil: the API's lists are [], never null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

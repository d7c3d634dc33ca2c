package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
)

// callBudget is the blocking budget of a daemon session's @remote calls.
const callBudget = defaultBudget

// handleFunctions lists the @remote functions of the session's kernel; it starts no
// kernel.
func (s *Server) handleFunctions(w http.ResponseWriter, r *http.Request, e *entry) {
	list := api.FunctionList{Functions: []api.Function{}}
	for _, f := range e.sess.Functions() {
		list.Functions = append(list.Functions, api.Function{
			Name: f.Name, Module: f.Module, QualName: f.QualName, Doc: f.Doc, Async: f.Async, Schema: f.Schema,
		})
	}
	writeJSON(w, http.StatusOK, list)
}

// handleCall calls a @remote function of the session's kernel: 200 with the value, or
// with the call's typed error (status "error"); an error of the request itself (no such
// session, a bad body) is the API's error.
func (s *Server) handleCall(w http.ResponseWriter, r *http.Request, e *entry) {
	var req api.CallFunction
	if err := readJSON(w, r, maxCodeBody, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Args) > 0 && string(req.Args) != "null" {
		var obj map[string]json.RawMessage
		if json.Unmarshal(req.Args, &obj) != nil {
			writeError(w, fmt.Errorf("args: %w: want a JSON object of keyword arguments", errInvalid))
			return
		}
	} else {
		req.Args = nil
	}
	var opts controller.CallOptions
	if req.BudgetMS != nil && *req.BudgetMS > 0 {
		opts.Budget = time.Duration(min(*req.BudgetMS, int64(callBudget/time.Millisecond))) * time.Millisecond
	}
	res, err := e.sess.Call(r.Context(), r.PathValue("name"), req.Args, opts)
	var rce *controller.RemoteCallError
	switch {
	case errors.As(err, &rce):
		reply := api.CallReply{Status: "error", Error: &api.CallError{Code: string(rce.Code), Message: rce.Error(), Reason: rce.Reason}}
		if x := rce.Exception; x != nil {
			reply.Error.Exception = &api.Exception{Name: x.EName, Value: x.EValue, Traceback: x.Traceback}
		}
		writeJSON(w, http.StatusOK, reply)
	case err != nil:
		writeError(w, err)
	default:
		out := toOutput(res.Output)
		reply := api.CallReply{ID: res.ID, Status: "ok", Value: res.Value, Output: &out}
		if res.Truncated != nil {
			t := toOutput(*res.Truncated)
			reply.Truncated = &t
		}
		writeJSON(w, http.StatusOK, reply)
	}
}

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/store"
)

// errInvalid is the class of a request the daemon refuses as malformed.
var errInvalid = errdefs.ErrInvalidArgument.WithMessage("invalid request")

// errNotFound is the class of a session, job or child that does not exist.
var errNotFound = errdefs.ErrNotFound

// errConflict is the class of a request the state of a session refuses.
var errConflict = errdefs.ErrConflict

// toAPI turns an error into the API's error. A few errors have codes of their own (a
// refused output read, a bad working directory, a frame over the protocol's limit); every
// other one is answered by its errdefs class (errors.Is), the one error vocabulary of
// kennel's packages: invalid argument 400, not found 404, conflict, already exists and
// failed precondition 409, unavailable 503, a full state store 507, anything else 500.
func toAPI(err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	e := &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: err.Error()}
	var re *output.ReadError
	switch {
	case errors.As(err, &re):
		e.Status, e.Code = http.StatusRequestedRangeNotSatisfiable, api.CodeOutputRefused
		if errdefs.IsInvalidArgument(err) {
			e.Status = http.StatusBadRequest
		}
		if re.Use != nil {
			e.Use = &api.Span{Offset: re.Use.Offset, Limit: re.Use.Limit}
		}
	case errors.Is(err, controller.ErrNoWorkingDir):
		e.Status, e.Code = http.StatusBadRequest, api.CodeNoWorkingDir
	case errors.Is(err, controller.ErrWorkingDirGone):
		e.Status, e.Code = http.StatusBadRequest, api.CodeWorkingDirGone
	case errors.Is(err, controller.ErrWorkingDirNotDir):
		e.Status, e.Code = http.StatusBadRequest, api.CodeWorkingDirNotDir
	case errors.Is(err, controller.ErrFrameTooLarge):
		e.Status, e.Code = http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case errdefs.IsInvalidArgument(err), errors.Is(err, syscall.ENAMETOOLONG):
		e.Status, e.Code = http.StatusBadRequest, api.CodeInvalid
	case errdefs.IsNotFound(err):
		e.Status, e.Code = http.StatusNotFound, api.CodeNotFound
	case errdefs.IsUnavailable(err):
		e.Status, e.Code = http.StatusServiceUnavailable, api.CodeUnavailable
	case errdefs.IsConflict(err), errdefs.IsAlreadyExists(err), errdefs.IsFailedPrecondition(err):
		e.Status, e.Code = http.StatusConflict, api.CodeConflict
	case errors.Is(err, store.ErrFull):
		e.Status, e.Code = http.StatusInsufficientStorage, api.CodeNoSpace
	}
	return e
}

// writeError writes err as an API error reply.
func writeError(w http.ResponseWriter, err error) {
	e := toAPI(err)
	writeJSON(w, e.Status, api.ErrorBody{Error: *e})
}

// writeJSON writes v as the JSON body of a reply with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// startNDJSON starts a 200 reply streamed as newline-delimited JSON; flush sends what
// was written so far to the client.
func startNDJSON(w http.ResponseWriter) (flush func() error) {
	w.Header().Set("Content-Type", api.MediaNDJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return http.NewResponseController(w).Flush
}

// nulChecker is a request body with strings that become paths or program arguments
// (api.CreateSession).
type nulChecker interface{ NULField() string }

// readJSON decodes the request body into v: at most limit bytes, one JSON value (then
// only white space), no unknown fields, and, for a body with path fields, no NUL byte in
// them. A body over limit is 413 too_large naming the limit; one that did not arrive
// within the body timeout is 408 timeout; anything else wrong is 400 invalid.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	switch _, err := dec.Token(); {
	case err == nil:
		return &api.Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: "request body: more than one JSON value"}
	case !errors.Is(err, io.EOF):
		return bodyError(err)
	}
	if c, ok := v.(nulChecker); ok {
		if f := c.NULField(); f != "" {
			return &api.Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: fmt.Sprintf("request body: %s holds a NUL byte, which no path or argument can hold", f)}
		}
	}
	return nil
}

// bodyError is the API error of a request body that could not be read or decoded.
func bodyError(err error) *api.Error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &api.Error{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge, Message: fmt.Sprintf("request body: over this route's limit of %d bytes", mbe.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &api.Error{Status: http.StatusRequestTimeout, Code: api.CodeTimeout, Message: "request body: " + err.Error()}
	}
	return &api.Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: "request body: " + err.Error()}
}

package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// HostFrame is a frame the host writes to a kernel. AppendLine appends the frame as one
// JSON object, `type` then `id` first, ended by '\n'; on error it returns dst unchanged.
type HostFrame interface {
	FrameType() string
	AppendLine(dst []byte) ([]byte, error)
}

// MarshalLine returns f's line, ended by '\n'.
func MarshalLine(f HostFrame) ([]byte, error) { return f.AppendLine(nil) }

func appendHead(dst []byte, typ, id string) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"id":`...)
	return appendString(dst, id)
}

func appendKey(dst []byte, key string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}

// Execute asks the kernel to run Code as cell ID. TimeoutMS, when positive, is the
// cell's own deadline: the kernel interrupts it (reason "timeout") that many
// milliseconds after it started; it is encoded only when set.
type Execute struct {
	ID        string
	Code      string
	TimeoutMS int64
}

// FrameType returns "execute".
func (Execute) FrameType() string { return TypeExecute }

// AppendLine appends `{"type":"execute","id":...,"code":...}` (with "timeout_ms" after
// the code when set) and a newline. It never fails.
func (f Execute) AppendLine(dst []byte) ([]byte, error) {
	dst = appendHead(dst, TypeExecute, f.ID)
	dst = appendString(appendKey(dst, "code"), f.Code)
	if f.TimeoutMS > 0 {
		dst = strconv.AppendInt(appendKey(dst, "timeout_ms"), f.TimeoutMS, 10)
	}
	return append(dst, '}', '\n'), nil
}

// Interrupt asks the kernel to raise KeyboardInterrupt in cell ID if it runs.
type Interrupt struct {
	ID string
}

// FrameType returns "interrupt".
func (Interrupt) FrameType() string { return TypeInterrupt }

// AppendLine appends `{"type":"interrupt","id":...}` and a newline. It never fails.
func (f Interrupt) AppendLine(dst []byte) ([]byte, error) {
	return append(appendHead(dst, TypeInterrupt, f.ID), '}', '\n'), nil
}

// ReplyError is the error of a host_reply. Reason and Version are set for path refusals
// (CodeOutside, CodeReadOnly) and omitted when empty.
type ReplyError struct {
	Code    Code
	Message string
	Reason  string
	Version string
}

// HostReply is the one answer to host request ID. With StatusOK it carries Result (any
// JSON value; nil encodes as null) and no Error; with StatusError or StatusDuplicate it
// carries Error and no Result.
type HostReply struct {
	ID     string
	Status ReplyStatus
	Result json.RawMessage
	Error  *ReplyError
}

// FrameType returns "host_reply".
func (HostReply) FrameType() string { return TypeHostReply }

// AppendLine appends the reply's line. Result is compacted onto the line; an invalid
// Result, an unknown Status, an Error with a StatusOK reply, a missing Error otherwise,
// or an unknown error Code is an ErrBadField *FrameError, and dst comes back unchanged.
func (f HostReply) AppendLine(dst []byte) ([]byte, error) {
	n := len(dst)
	switch f.Status {
	case StatusOK:
		if f.Error != nil {
			return dst, badField(TypeHostReply, "error", "set with status %q", f.Status)
		}
	case StatusError, StatusDuplicate:
		if f.Error == nil {
			return dst, badField(TypeHostReply, "error", "missing with status %q", f.Status)
		}
		if len(f.Result) != 0 {
			return dst, badField(TypeHostReply, "result", "set with status %q", f.Status)
		}
		if !f.Error.Code.Valid() {
			return dst, badField(TypeHostReply, "error", "unknown code %q", f.Error.Code)
		}
	default:
		return dst, badField(TypeHostReply, "status", "unknown status %q", f.Status)
	}
	dst = appendHead(dst, TypeHostReply, f.ID)
	dst = appendString(appendKey(dst, "status"), string(f.Status))
	if f.Status == StatusOK {
		dst = appendKey(dst, "result")
		if len(f.Result) == 0 {
			dst = append(dst, "null"...)
		} else {
			if !utf8.Valid(f.Result) {
				return dst[:n], badField(TypeHostReply, "result", "not valid UTF-8")
			}
			buf := bytes.NewBuffer(dst)
			if err := json.Compact(buf, f.Result); err != nil {
				return dst[:n], &FrameError{Frame: TypeHostReply, Field: "result", Err: fmt.Errorf("%w: %w", ErrBadField, err)}
			}
			dst = buf.Bytes()
		}
	} else {
		dst = appendKey(dst, "error")
		dst = append(dst, `{"code":`...)
		dst = appendString(dst, string(f.Error.Code))
		dst = appendString(appendKey(dst, "message"), f.Error.Message)
		if f.Error.Reason != "" {
			dst = appendString(appendKey(dst, "reason"), f.Error.Reason)
		}
		if f.Error.Version != "" {
			dst = appendString(appendKey(dst, "version"), f.Error.Version)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}', '\n'), nil
}

// JobRun asks the kernel to start shell job ID running `/bin/sh -c Command`. Stdout and
// Stderr, when set, are paths (FIFOs the host reads, for a kernel that shares the host's
// file system) the kernel opens for writing and gives the job as its stdout and stderr,
// instead of pipes it reads and forwards as job_output frames; each is encoded only when
// set.
type JobRun struct {
	ID      string
	Command string
	Stdout  string
	Stderr  string
}

// FrameType returns "job_run".
func (JobRun) FrameType() string { return TypeJobRun }

// AppendLine appends `{"type":"job_run","id":...,"command":...}` (with "stdout" and
// "stderr" after the command when set) and a newline. It never fails.
func (f JobRun) AppendLine(dst []byte) ([]byte, error) {
	dst = appendHead(dst, TypeJobRun, f.ID)
	dst = appendString(appendKey(dst, "command"), f.Command)
	if f.Stdout != "" {
		dst = appendString(appendKey(dst, "stdout"), f.Stdout)
	}
	if f.Stderr != "" {
		dst = appendString(appendKey(dst, "stderr"), f.Stderr)
	}
	return append(dst, '}', '\n'), nil
}

// JobKill asks the kernel to signal job ID's process group. Signal 0 omits the field, and
// the kernel sends its default, 15 (SIGTERM).
type JobKill struct {
	ID     string
	Signal int
}

// FrameType returns "job_kill".
func (JobKill) FrameType() string { return TypeJobKill }

// AppendLine appends `{"type":"job_kill","id":...,"signal":...}` and a newline. A
// negative Signal or one over 64 is an ErrBadField *FrameError.
func (f JobKill) AppendLine(dst []byte) ([]byte, error) {
	if f.Signal < 0 || f.Signal > 64 {
		return dst, badField(TypeJobKill, "signal", "%d out of range 1..64", f.Signal)
	}
	dst = appendHead(dst, TypeJobKill, f.ID)
	if f.Signal != 0 {
		dst = strconv.AppendInt(appendKey(dst, "signal"), int64(f.Signal), 10)
	}
	return append(dst, '}', '\n'), nil
}

// Shutdown asks the kernel to stop its jobs and exit. Its id is "".
type Shutdown struct{}

// FrameType returns "shutdown".
func (Shutdown) FrameType() string { return TypeShutdown }

// AppendLine appends `{"type":"shutdown","id":""}` and a newline. It never fails.
func (f Shutdown) AppendLine(dst []byte) ([]byte, error) {
	return append(appendHead(dst, TypeShutdown, ""), '}', '\n'), nil
}

// Call asks the kernel to call @remote function Function of module Module with Args (a
// JSON object of keyword arguments; nil encodes as {}), as call ID: one done of that id
// answers it.
type Call struct {
	ID       string
	Module   string
	Function string
	Args     json.RawMessage
}

// FrameType returns "call".
func (Call) FrameType() string { return TypeCall }

// AppendLine appends `{"type":"call","id":...,"module":...,"function":...,"args":{...}}`
// and a newline, Args compacted. Args that are not a JSON object (or not UTF-8) are an
// ErrBadField *FrameError, and dst comes back unchanged.
func (f Call) AppendLine(dst []byte) ([]byte, error) {
	n := len(dst)
	dst = appendHead(dst, TypeCall, f.ID)
	dst = appendString(appendKey(dst, "module"), f.Module)
	dst = appendString(appendKey(dst, "function"), f.Function)
	dst = appendKey(dst, "args")
	args := bytes.TrimSpace(f.Args)
	if len(args) == 0 {
		dst = append(dst, '{', '}')
	} else {
		if args[0] != '{' || !utf8.Valid(args) {
			return dst[:n], badField(TypeCall, "args", "not a JSON object")
		}
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, args); err != nil {
			return dst[:n], &FrameError{Frame: TypeCall, Field: "args", Err: fmt.Errorf("%w: %w", ErrBadField, err)}
		}
		dst = buf.Bytes()
	}
	return append(dst, '}', '\n'), nil
}

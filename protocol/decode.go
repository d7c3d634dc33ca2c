package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Event is a frame a kernel writes to the host: one of Hello, Stream, Display, Done,
// HostRequest, JobStart, JobOutput, JobEnd or Log.
type Event interface {
	// EventName returns the frame's "event" value, e.g. "stream".
	EventName() string
}

// Hello is the kernel's first frame. Its id is "".
type Hello struct {
	Protocol int    // the protocol version the kernel speaks; see CheckVersion
	PID      int    // the kernel's process id, in the kernel's pid namespace
	PGID     int    // the kernel's process group
	Python   string // the interpreter's version, e.g. "3.11.7"
	Bundle   string // sha256 hex of the stub bundle
	// Jobs are the shell jobs a detached kernel still runs, as its link hello names them
	// (a reattached kernel's; none from a fresh one). Optional: absent is none.
	Jobs []HelloJob
}

// HelloJob is a live job a hello names: its frame id, pid and process group.
type HelloJob struct {
	ID   string `json:"id"`
	PID  int    `json:"pid"`
	PGID int    `json:"pgid"`
}

// maxHelloJobs bounds the jobs a hello may name.
const maxHelloJobs = 4096

// Stream is output of cell ID (or of no cell, with ID ""), in the order written.
type Stream struct {
	ID   string
	Name string // StreamStdout or StreamStderr
	Text string
}

// Display is a rich value cell ID displayed.
type Display struct {
	ID   string
	Data json.RawMessage // a JSON object: MIME type to value
}

// CellError is the Python exception that ended a cell.
type CellError struct {
	EName     string // the exception's type name
	EValue    string // str() of the exception
	Traceback string // the formatted traceback; a list of lines is joined with "\n"
}

// Done says cell ID ended; exactly one follows each execute.
type Done struct {
	ID     string
	Status string     // DoneOK, DoneError or DoneInterrupted
	Result *string    // repr of the final expression, or nil
	Error  *CellError // nil with DoneOK, set with DoneError
	// Reason says why the kernel itself interrupted the cell ("memory": its memory cap),
	// "" otherwise; Note then says so for people.
	Reason string
	Note   string
}

// HostRequest is a blocking call from cell Cell; the host answers with one host_reply of
// the same ID.
type HostRequest struct {
	ID   string
	Type string
	Cell string
	Args json.RawMessage // a JSON object, or nil when the frame has no "args"
}

// JobStart says shell job ID started in its own process group.
type JobStart struct {
	ID      string
	PID     int
	PGID    int
	Command string
}

// JobOutput is bytes as read from job ID's pipe.
type JobOutput struct {
	ID   string
	Name string // StreamStdout or StreamStderr
	Data []byte // decoded from base64
}

// JobEnd says job ID ended; exactly once per job. At most one of ExitCode and Signal is set.
type JobEnd struct {
	ID       string
	ExitCode *int
	Signal   *int
}

// Log is a diagnostic from the stub.
type Log struct {
	Level   string // LevelDebug, LevelInfo, LevelWarning or LevelError
	Message string
}

// EventName returns "hello".
func (Hello) EventName() string { return EventHello }

// EventName returns "stream".
func (Stream) EventName() string { return EventStream }

// EventName returns "display".
func (Display) EventName() string { return EventDisplay }

// EventName returns "done".
func (Done) EventName() string { return EventDone }

// EventName returns "host_request".
func (HostRequest) EventName() string { return EventHostRequest }

// EventName returns "job_start".
func (JobStart) EventName() string { return EventJobStart }

// EventName returns "job_output".
func (JobOutput) EventName() string { return EventJobOutput }

// EventName returns "job_end".
func (JobEnd) EventName() string { return EventJobEnd }

// EventName returns "log".
func (Log) EventName() string { return EventLog }

// CheckVersion returns nil if the kernel speaks Version, and an ErrVersion *FrameError
// naming both versions otherwise.
func (h Hello) CheckVersion() error {
	if h.Protocol != Version {
		return &FrameError{Frame: EventHello, Field: "protocol", Err: fmt.Errorf("%w: kernel speaks %d, host speaks %d", ErrVersion, h.Protocol, Version)}
	}
	return nil
}

// DecodeEvent decodes any kernel event. Every decoder in this package checks the whole
// line: valid UTF-8, one JSON object, no key twice, "event" and "id" present as strings,
// every field of the event present with its JSON type and in its range. Unknown keys are
// ignored (a later stub may add fields). An error is a *FrameError; an unknown event is
// ErrWrongEvent.
func DecodeEvent(line []byte) (Event, error) {
	m, err := parseObject("", line)
	if err != nil {
		return nil, err
	}
	r := &frameReader{m: m}
	ev := r.str("event")
	if r.err != nil {
		return nil, r.err
	}
	switch ev {
	case EventHello:
		return event(decodeHello(m))
	case EventStream:
		return event(decodeStream(m))
	case EventDisplay:
		return event(decodeDisplay(m))
	case EventDone:
		return event(decodeDone(m))
	case EventHostRequest:
		return event(decodeHostRequest(m))
	case EventJobStart:
		return event(decodeJobStart(m))
	case EventJobOutput:
		return event(decodeJobOutput(m))
	case EventJobEnd:
		return event(decodeJobEnd(m))
	case EventLog:
		return event(decodeLog(m))
	}
	return nil, &FrameError{Field: "event", Err: fmt.Errorf("%w: unknown event %q", ErrWrongEvent, ev)}
}

// event turns a decoder's result into DecodeEvent's, with a nil Event on error.
func event[T Event](v T, err error) (Event, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// decodeAs parses line, checks that its event is want and that it has a string id, and
// decodes it with decode.
func decodeAs[T Event](want string, line []byte, decode func(fields) (T, error)) (T, error) {
	var zero T
	m, err := parseObject(want, line)
	if err != nil {
		return zero, err
	}
	r := &frameReader{m: m, frame: want}
	if ev := r.str("event"); r.err != nil {
		return zero, r.err
	} else if ev != want {
		return zero, &FrameError{Frame: want, Field: "event", Err: fmt.Errorf("%w: got %q", ErrWrongEvent, ev)}
	}
	return decode(m)
}

// decoded returns v, or the zero value and r's refusal when r refused a field.
func decoded[T any](r *frameReader, v T) (T, error) {
	if r.err != nil {
		var zero T
		return zero, r.err
	}
	return v, nil
}

// DecodeHello decodes a hello event. It does not check the version: see CheckVersion.
func DecodeHello(line []byte) (Hello, error) { return decodeAs(EventHello, line, decodeHello) }

func decodeHello(m fields) (Hello, error) {
	r := &frameReader{m: m, frame: EventHello}
	r.str("id")
	h := Hello{Protocol: r.integer("protocol"), PID: r.integer("pid")}
	r.check(h.PID <= 0, "pid", "%d is not a pid", h.PID)
	h.PGID = r.integer("pgid")
	r.check(h.PGID <= 0, "pgid", "%d is not a process group", h.PGID)
	h.Python, h.Bundle = r.str("python"), r.str("bundle")
	r.check(!isHex(h.Bundle, 64), "bundle", "not 64 lowercase hex digits")
	if raw, ok := m["jobs"]; ok && r.err == nil {
		if err := json.Unmarshal(raw, &h.Jobs); err != nil {
			r.fail("jobs", "not a list of jobs: %v", err)
		}
		r.check(len(h.Jobs) > maxHelloJobs, "jobs", "%d jobs (at most %d)", len(h.Jobs), maxHelloJobs)
		for _, j := range h.Jobs {
			r.check(j.ID == "" || j.PID <= 0 || j.PGID <= 0, "jobs", "job %+v has no id, pid or group", j)
		}
	}
	return decoded(r, h)
}

func isHex(s string, n int) bool {
	return len(s) == n && strings.Trim(s, "0123456789abcdef") == ""
}

// DecodeStream decodes a stream event.
func DecodeStream(line []byte) (Stream, error) { return decodeAs(EventStream, line, decodeStream) }

func decodeStream(m fields) (Stream, error) {
	r := &frameReader{m: m, frame: EventStream}
	return decoded(r, Stream{ID: r.str("id"), Name: r.oneOf("name", StreamStdout, StreamStderr), Text: r.str("text")})
}

// DecodeDisplay decodes a display event.
func DecodeDisplay(line []byte) (Display, error) {
	return decodeAs(EventDisplay, line, decodeDisplay)
}

func decodeDisplay(m fields) (Display, error) {
	r := &frameReader{m: m, frame: EventDisplay}
	return decoded(r, Display{ID: r.str("id"), Data: r.object("data")})
}

// DecodeDone decodes a done event. Status "error" needs an error object; status "ok"
// needs error null; "interrupted" may carry either.
func DecodeDone(line []byte) (Done, error) { return decodeAs(EventDone, line, decodeDone) }

func decodeDone(m fields) (Done, error) {
	r := &frameReader{m: m, frame: EventDone}
	d := Done{ID: r.str("id"), Status: r.oneOf("status", DoneOK, DoneError, DoneInterrupted), Result: opt(r, "result", r.str)}
	if raw, ok := r.raw("error"); ok && string(raw) != "null" {
		r.check(raw[0] != '{', "error", "want an object or null, got %s", jsonKind(raw))
		if r.err == nil {
			d.Error, r.err = decodeCellError(raw)
		}
	}
	if r.has("reason") {
		d.Reason = r.str("reason")
		if r.has("note") {
			d.Note = r.str("note")
		}
	}
	r.check(d.Status == DoneOK && d.Error != nil, "error", "set with status %q", d.Status)
	r.check(d.Status == DoneError && d.Error == nil, "error", "null with status %q", d.Status)
	return decoded(r, d)
}

func decodeCellError(raw json.RawMessage) (*CellError, error) {
	const f = EventDone
	m, err := parseObject(f, raw)
	if err != nil {
		return nil, err
	}
	r := &frameReader{m: m, frame: f}
	e := &CellError{EName: r.str("ename"), EValue: r.str("evalue")}
	tb, ok := r.raw("traceback")
	switch {
	case !ok:
	case tb[0] == '"':
		e.Traceback = r.str("traceback")
	case tb[0] == '[':
		var lines []string
		if err := json.Unmarshal(tb, &lines); err != nil {
			r.fail("traceback", "want a string or a list of strings")
		}
		e.Traceback = strings.Join(lines, "\n")
	default:
		r.fail("traceback", "want a string or a list of strings, got %s", jsonKind(tb))
	}
	return decoded(r, e)
}

// DecodeHostRequest decodes a host_request event. Its args, when present, must be an object.
func DecodeHostRequest(line []byte) (HostRequest, error) {
	return decodeAs(EventHostRequest, line, decodeHostRequest)
}

func decodeHostRequest(m fields) (HostRequest, error) {
	r := &frameReader{m: m, frame: EventHostRequest}
	req := HostRequest{ID: r.str("id"), Type: r.str("type"), Cell: r.str("cell")}
	if r.has("args") {
		req.Args = r.object("args")
	}
	return decoded(r, req)
}

// DecodeJobStart decodes a job_start event.
func DecodeJobStart(line []byte) (JobStart, error) {
	return decodeAs(EventJobStart, line, decodeJobStart)
}

func decodeJobStart(m fields) (JobStart, error) {
	r := &frameReader{m: m, frame: EventJobStart}
	j := JobStart{ID: r.str("id"), PID: r.integer("pid")}
	r.check(j.PID <= 0, "pid", "%d is not a pid", j.PID)
	j.PGID = r.integer("pgid")
	r.check(j.PGID <= 0, "pgid", "%d is not a process group", j.PGID)
	j.Command = r.str("command")
	return decoded(r, j)
}

// DecodeJobOutput decodes a job_output event; its data is standard base64 with padding.
func DecodeJobOutput(line []byte) (JobOutput, error) {
	return decodeAs(EventJobOutput, line, decodeJobOutput)
}

func decodeJobOutput(m fields) (JobOutput, error) {
	r := &frameReader{m: m, frame: EventJobOutput}
	return decoded(r, JobOutput{ID: r.str("id"), Name: r.oneOf("name", StreamStdout, StreamStderr), Data: r.base64("data")})
}

// DecodeJobEnd decodes a job_end event: exit_code and signal are integers or null, and
// not both set.
func DecodeJobEnd(line []byte) (JobEnd, error) { return decodeAs(EventJobEnd, line, decodeJobEnd) }

func decodeJobEnd(m fields) (JobEnd, error) {
	r := &frameReader{m: m, frame: EventJobEnd}
	j := JobEnd{ID: r.str("id"), ExitCode: opt(r, "exit_code", r.integer), Signal: opt(r, "signal", r.integer)}
	r.check(j.ExitCode != nil && j.Signal != nil, "signal", "set together with exit_code")
	if j.Signal != nil {
		r.check(*j.Signal <= 0 || *j.Signal > 64, "signal", "%d out of range 1..64", *j.Signal)
	}
	return decoded(r, j)
}

// DecodeLog decodes a log event.
func DecodeLog(line []byte) (Log, error) { return decodeAs(EventLog, line, decodeLog) }

func decodeLog(m fields) (Log, error) {
	r := &frameReader{m: m, frame: EventLog}
	r.str("id")
	return decoded(r, Log{Level: r.oneOf("level", LevelDebug, LevelInfo, LevelWarning, LevelError), Message: r.str("message")})
}

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
	ev, err := m.str("", "event")
	if err != nil {
		return nil, err
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

// parseEvent parses line and checks that its event is want and that it has a string id.
func parseEvent(want string, line []byte) (fields, error) {
	m, err := parseObject(want, line)
	if err != nil {
		return nil, err
	}
	ev, err := m.str(want, "event")
	if err != nil {
		return nil, err
	}
	if ev != want {
		return nil, &FrameError{Frame: want, Field: "event", Err: fmt.Errorf("%w: got %q", ErrWrongEvent, ev)}
	}
	return m, nil
}

// DecodeHello decodes a hello event. It does not check the version: see CheckVersion.
func DecodeHello(line []byte) (Hello, error) {
	m, err := parseEvent(EventHello, line)
	if err != nil {
		return Hello{}, err
	}
	return decodeHello(m)
}

func decodeHello(m fields) (h Hello, err error) {
	const f = EventHello
	if _, err = m.str(f, "id"); err != nil {
		return Hello{}, err
	}
	if h.Protocol, err = m.integer(f, "protocol"); err != nil {
		return Hello{}, err
	}
	if h.PID, err = m.integer(f, "pid"); err != nil {
		return Hello{}, err
	}
	if h.PID <= 0 {
		return Hello{}, badField(f, "pid", "%d is not a pid", h.PID)
	}
	if h.PGID, err = m.integer(f, "pgid"); err != nil {
		return Hello{}, err
	}
	if h.PGID <= 0 {
		return Hello{}, badField(f, "pgid", "%d is not a process group", h.PGID)
	}
	if h.Python, err = m.str(f, "python"); err != nil {
		return Hello{}, err
	}
	if h.Bundle, err = m.str(f, "bundle"); err != nil {
		return Hello{}, err
	}
	if !isHex(h.Bundle, 64) {
		return Hello{}, badField(f, "bundle", "not 64 lowercase hex digits")
	}
	if raw, ok := m["jobs"]; ok {
		if err := json.Unmarshal(raw, &h.Jobs); err != nil {
			return Hello{}, badField(f, "jobs", "not a list of jobs: %v", err)
		}
		if len(h.Jobs) > maxHelloJobs {
			return Hello{}, badField(f, "jobs", "%d jobs (at most %d)", len(h.Jobs), maxHelloJobs)
		}
		for _, j := range h.Jobs {
			if j.ID == "" || j.PID <= 0 || j.PGID <= 0 {
				return Hello{}, badField(f, "jobs", "job %+v has no id, pid or group", j)
			}
		}
	}
	return h, nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DecodeStream decodes a stream event.
func DecodeStream(line []byte) (Stream, error) {
	m, err := parseEvent(EventStream, line)
	if err != nil {
		return Stream{}, err
	}
	return decodeStream(m)
}

func decodeStream(m fields) (s Stream, err error) {
	const f = EventStream
	if s.ID, err = m.str(f, "id"); err != nil {
		return Stream{}, err
	}
	if s.Name, err = m.oneOf(f, "name", StreamStdout, StreamStderr); err != nil {
		return Stream{}, err
	}
	if s.Text, err = m.str(f, "text"); err != nil {
		return Stream{}, err
	}
	return s, nil
}

// DecodeDisplay decodes a display event.
func DecodeDisplay(line []byte) (Display, error) {
	m, err := parseEvent(EventDisplay, line)
	if err != nil {
		return Display{}, err
	}
	return decodeDisplay(m)
}

func decodeDisplay(m fields) (d Display, err error) {
	const f = EventDisplay
	if d.ID, err = m.str(f, "id"); err != nil {
		return Display{}, err
	}
	if d.Data, err = m.object(f, "data"); err != nil {
		return Display{}, err
	}
	return d, nil
}

// DecodeDone decodes a done event. Status "error" needs an error object; status "ok"
// needs error null; "interrupted" may carry either.
func DecodeDone(line []byte) (Done, error) {
	m, err := parseEvent(EventDone, line)
	if err != nil {
		return Done{}, err
	}
	return decodeDone(m)
}

func decodeDone(m fields) (d Done, err error) {
	const f = EventDone
	if d.ID, err = m.str(f, "id"); err != nil {
		return Done{}, err
	}
	if d.Status, err = m.oneOf(f, "status", DoneOK, DoneError, DoneInterrupted); err != nil {
		return Done{}, err
	}
	if d.Result, err = m.optStr(f, "result"); err != nil {
		return Done{}, err
	}
	raw, ok := m["error"]
	if !ok {
		return Done{}, badField(f, "error", "missing")
	}
	if string(raw) != "null" {
		if raw[0] != '{' {
			return Done{}, badField(f, "error", "want an object or null, got %s", jsonKind(raw))
		}
		if d.Error, err = decodeCellError(raw); err != nil {
			return Done{}, err
		}
	}
	if _, ok := m["reason"]; ok {
		if d.Reason, err = m.str(f, "reason"); err != nil {
			return Done{}, err
		}
		if _, ok := m["note"]; ok {
			if d.Note, err = m.str(f, "note"); err != nil {
				return Done{}, err
			}
		}
	}
	switch {
	case d.Status == DoneOK && d.Error != nil:
		return Done{}, badField(f, "error", "set with status %q", d.Status)
	case d.Status == DoneError && d.Error == nil:
		return Done{}, badField(f, "error", "null with status %q", d.Status)
	}
	return d, nil
}

func decodeCellError(raw json.RawMessage) (*CellError, error) {
	const f = EventDone
	m, err := parseObject(f, raw)
	if err != nil {
		return nil, err
	}
	var e CellError
	if e.EName, err = m.str(f, "ename"); err != nil {
		return nil, err
	}
	if e.EValue, err = m.str(f, "evalue"); err != nil {
		return nil, err
	}
	tb, ok := m["traceback"]
	switch {
	case !ok:
		return nil, badField(f, "traceback", "missing")
	case tb[0] == '"':
		e.Traceback, err = m.str(f, "traceback")
		if err != nil {
			return nil, err
		}
	case tb[0] == '[':
		var lines []string
		if err := json.Unmarshal(tb, &lines); err != nil {
			return nil, badField(f, "traceback", "want a string or a list of strings")
		}
		e.Traceback = strings.Join(lines, "\n")
	default:
		return nil, badField(f, "traceback", "want a string or a list of strings, got %s", jsonKind(tb))
	}
	return &e, nil
}

// DecodeHostRequest decodes a host_request event. Its args, when present, must be an object.
func DecodeHostRequest(line []byte) (HostRequest, error) {
	m, err := parseEvent(EventHostRequest, line)
	if err != nil {
		return HostRequest{}, err
	}
	return decodeHostRequest(m)
}

func decodeHostRequest(m fields) (r HostRequest, err error) {
	const f = EventHostRequest
	if r.ID, err = m.str(f, "id"); err != nil {
		return HostRequest{}, err
	}
	if r.Type, err = m.str(f, "type"); err != nil {
		return HostRequest{}, err
	}
	if r.Cell, err = m.str(f, "cell"); err != nil {
		return HostRequest{}, err
	}
	if _, ok := m["args"]; ok {
		if r.Args, err = m.object(f, "args"); err != nil {
			return HostRequest{}, err
		}
	}
	return r, nil
}

// DecodeJobStart decodes a job_start event.
func DecodeJobStart(line []byte) (JobStart, error) {
	m, err := parseEvent(EventJobStart, line)
	if err != nil {
		return JobStart{}, err
	}
	return decodeJobStart(m)
}

func decodeJobStart(m fields) (j JobStart, err error) {
	const f = EventJobStart
	if j.ID, err = m.str(f, "id"); err != nil {
		return JobStart{}, err
	}
	if j.PID, err = m.integer(f, "pid"); err != nil {
		return JobStart{}, err
	}
	if j.PID <= 0 {
		return JobStart{}, badField(f, "pid", "%d is not a pid", j.PID)
	}
	if j.PGID, err = m.integer(f, "pgid"); err != nil {
		return JobStart{}, err
	}
	if j.PGID <= 0 {
		return JobStart{}, badField(f, "pgid", "%d is not a process group", j.PGID)
	}
	if j.Command, err = m.str(f, "command"); err != nil {
		return JobStart{}, err
	}
	return j, nil
}

// DecodeJobOutput decodes a job_output event; its data is standard base64 with padding.
func DecodeJobOutput(line []byte) (JobOutput, error) {
	m, err := parseEvent(EventJobOutput, line)
	if err != nil {
		return JobOutput{}, err
	}
	return decodeJobOutput(m)
}

func decodeJobOutput(m fields) (j JobOutput, err error) {
	const f = EventJobOutput
	if j.ID, err = m.str(f, "id"); err != nil {
		return JobOutput{}, err
	}
	if j.Name, err = m.oneOf(f, "name", StreamStdout, StreamStderr); err != nil {
		return JobOutput{}, err
	}
	if j.Data, err = m.base64(f, "data"); err != nil {
		return JobOutput{}, err
	}
	return j, nil
}

// DecodeJobEnd decodes a job_end event: exit_code and signal are integers or null, and
// not both set.
func DecodeJobEnd(line []byte) (JobEnd, error) {
	m, err := parseEvent(EventJobEnd, line)
	if err != nil {
		return JobEnd{}, err
	}
	return decodeJobEnd(m)
}

func decodeJobEnd(m fields) (j JobEnd, err error) {
	const f = EventJobEnd
	if j.ID, err = m.str(f, "id"); err != nil {
		return JobEnd{}, err
	}
	if j.ExitCode, err = m.optInt(f, "exit_code"); err != nil {
		return JobEnd{}, err
	}
	if j.Signal, err = m.optInt(f, "signal"); err != nil {
		return JobEnd{}, err
	}
	if j.ExitCode != nil && j.Signal != nil {
		return JobEnd{}, badField(f, "signal", "set together with exit_code")
	}
	if j.Signal != nil && (*j.Signal <= 0 || *j.Signal > 64) {
		return JobEnd{}, badField(f, "signal", "%d out of range 1..64", *j.Signal)
	}
	return j, nil
}

// DecodeLog decodes a log event.
func DecodeLog(line []byte) (Log, error) {
	m, err := parseEvent(EventLog, line)
	if err != nil {
		return Log{}, err
	}
	return decodeLog(m)
}

func decodeLog(m fields) (l Log, err error) {
	const f = EventLog
	if _, err = m.str(f, "id"); err != nil {
		return Log{}, err
	}
	if l.Level, err = m.oneOf(f, "level", LevelDebug, LevelInfo, LevelWarning, LevelError); err != nil {
		return Log{}, err
	}
	if l.Message, err = m.str(f, "message"); err != nil {
		return Log{}, err
	}
	return l, nil
}

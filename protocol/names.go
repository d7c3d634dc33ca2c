package protocol

// The events a kernel writes (the value of a frame's "event" key).
const (
	EventHello       = "hello"
	EventStream      = "stream"
	EventDisplay     = "display"
	EventDone        = "done"
	EventHostRequest = "host_request"
	EventJobStart    = "job_start"
	EventJobOutput   = "job_output"
	EventJobEnd      = "job_end"
	EventLog         = "log"
)

// The frame types the host writes (the value of a frame's "type" key).
const (
	TypeExecute   = "execute"
	TypeInterrupt = "interrupt"
	TypeHostReply = "host_reply"
	TypeJobRun    = "job_run"
	TypeJobKill   = "job_kill"
	TypeShutdown  = "shutdown"
	TypeCall      = "call"
)

// ReplyStatus is the status of a host_reply.
type ReplyStatus string

// The statuses of a host_reply.
const (
	// StatusOK: the handler succeeded; the reply carries a result.
	StatusOK ReplyStatus = "ok"
	// StatusError: the request failed; the reply carries an error.
	StatusError ReplyStatus = "error"
	// StatusDuplicate: the request's id was in use; the kernel drops this reply.
	StatusDuplicate ReplyStatus = "duplicate"
)

// The statuses of a done event.
const (
	DoneOK          = "ok"
	DoneError       = "error"
	DoneInterrupted = "interrupted"
)

// ReasonMemory is a done event's reason for a cell the kernel interrupted because its
// memory passed the cap (KENNEL_KERNEL_MEMORY_BYTES).
const ReasonMemory = "memory"

// The stream names of stream and job_output events.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// The levels of a log event.
const (
	LevelDebug   = "debug"
	LevelInfo    = "info"
	LevelWarning = "warning"
	LevelError   = "error"
)

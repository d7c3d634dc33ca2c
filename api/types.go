package api

import (
	"encoding/json"
	"strings"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
)

// MediaNDJSON is the Accept value that asks POST /sessions/{id}/cells to stream the cell's
// output as newline-delimited JSON Events while it runs.
const MediaNDJSON = "application/x-ndjson"

// HeaderIdempotencyKey makes a retried POST /sessions return the session the first
// request with the same key created, instead of a second session.
const HeaderIdempotencyKey = "Idempotency-Key"

// CreateSession is the body of POST /sessions.
type CreateSession struct {
	// Cwd is the session's working directory on the daemon's host: it must exist and be a
	// directory. Required.
	Cwd string `json:"cwd"`
	// Transport says where the kernel runs. Nil: the daemon's default (kennel serve reads
	// the kernelTransport setting of the project at Cwd; local when none).
	Transport *Transport `json:"transport,omitempty"`
	// Limits bound the session's output. Nil: the defaults.
	Limits *Limits `json:"limits,omitempty"`
}

// NULField names, by its JSON path, the first string of c that becomes a path and holds
// a NUL byte, which no path can hold ("cwd"); "" when none does. The transport's fields
// are checked by its own decoding (sessionspec.Decode), which names the bad field.
func (c CreateSession) NULField() string {
	if strings.IndexByte(c.Cwd, 0) >= 0 {
		return "cwd"
	}
	return ""
}

// Transport says where a session's kernel runs: the one description of package
// sessionspec (the kernelTransport setting's form), checked as it is decoded.
type Transport = sessionspec.Transport

// Local, Docker, SSH, Containerd and Kubernetes are the kinds' own fields of a Transport.
type (
	Local      = sessionspec.Local
	Docker     = sessionspec.Docker
	SSH        = sessionspec.SSH
	Containerd = sessionspec.Containerd
	Kubernetes = sessionspec.Kubernetes
)

// Mount is one host directory seen inside the sandbox (sandbox, host, readOnly).
type Mount = pathmap.Mount

// Limits bound what a session's cells and jobs report, and its kernel's memory.
type Limits struct {
	// Off keeps every byte (truncation off); Bytes, Lines and Keep are then ignored.
	Off bool `json:"off,omitempty"`
	// Bytes and Lines bound the kept window; zero means the default (50 KiB, 2000 lines).
	Bytes int64 `json:"bytes,omitempty"`
	Lines int64 `json:"lines,omitempty"`
	// Keep is "head" (default) or "tail".
	Keep string `json:"keep,omitempty"`
	// KernelMemoryBytes caps the kernel's resident memory: a cell running when it passes
	// the cap is interrupted (its Cell.Reason is "memory") and the namespace is kept.
	// Zero means 256 MiB; -1 none. A sampled guard (every 100 ms while cells run), not
	// an allocator limit: the transport's memory limit stays the hard bound.
	KernelMemoryBytes int64 `json:"kernel_memory_bytes,omitempty"`
}

// Session describes a session (POST /sessions, GET /sessions, GET /sessions/{id}).
type Session struct {
	ID  string `json:"id"`
	Cwd string `json:"cwd"`
	// CreatedAt is Unix milliseconds.
	CreatedAt int64 `json:"created_at"`
	// Parent is the parent session's id for a child session, else "".
	Parent string `json:"parent,omitempty"`
	// Workspace is the child's isolated workspace directory, for a child session.
	Workspace string `json:"workspace,omitempty"`
	// Pool, in the reply that created the session, says whether a warm pool of its
	// transport's kernels handed it one: "hit", or "miss" (none of its description was
	// ready: its kernel started cold). Empty where no pool applies, and in later replies.
	Pool string `json:"pool,omitempty"`
	// Kernel is the kernel observation, read without starting a kernel.
	Kernel Kernel `json:"kernel"`
}

// Kernel is what a session shows of its kernel and background jobs. Every field is null
// when unknown.
type Kernel struct {
	// State is "running" (a kernel said hello), "idle" (no kernel now; the next cell
	// starts one), "reattaching" (a restarted daemon is reaching the session's kernel
	// again; cells wait for it), "lost" (a restarted daemon found the session's kernel
	// gone, Lost says why; the next cell starts a fresh one) or "closed".
	State *string `json:"state"`
	// Transport is the kernel's transport kind.
	Transport *string `json:"transport"`
	// PID is the kernel's pid as its hello reported it.
	PID *int `json:"pid"`
	// LiveJobCount counts every live job.
	LiveJobCount *int `json:"live_job_count"`
	// RunningJobs lists up to 100 live jobs by id.
	RunningJobs []RunningJob `json:"running_jobs"`
	// Origin is how the session's first kernel came to be: "fresh" (started for it) or
	// "resumed" (the kernel an earlier daemon let go of, namespace and all, after a
	// restart).
	Origin *string `json:"origin"`
	// Lost, when a restarted daemon could not resume the session's kernel (it was gone),
	// says why: the session runs a fresh kernel, its namespace is lost.
	Lost *string `json:"lost"`
	// InstanceID names the running kernel (its run directory's name) when it can outlive
	// the daemon.
	InstanceID *string `json:"instance_id"`
	// Build is the stub bundle hash the running kernel reported.
	Build *string `json:"build"`
	// Stale: the running kernel is of another build than the daemon's (resumed after an
	// upgrade); it serves on and is replaced at its next idle moment, its namespace carried.
	Stale *bool `json:"stale"`
}

// Upgrade says that a stale kernel was replaced and what of its namespace was carried:
// the reply of POST /sessions/{id}/kernel/upgrade, and a cell reply's notice when the
// replacement happened just before that cell.
type Upgrade struct {
	// From and To are the builds (stub bundle hashes) of the old and the new kernel.
	From string `json:"from"`
	To   string `json:"to"`
	// Carried and Left name the namespace's values carried over and left behind (values
	// that do not pickle).
	Carried []string `json:"carried"`
	Left    []string `json:"left"`
}

// RunningJob is one live job of an observation.
type RunningJob struct {
	ID  string `json:"id"`
	PID *int   `json:"pid"`
	// Command is at most 4096 Unicode scalars.
	Command string `json:"command"`
	// StartedAt is Unix milliseconds, 0 when unknown.
	StartedAt int64 `json:"started_at"`
}

// SessionList is the body of GET /sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// RunCell is the body of POST /sessions/{id}/cells.
type RunCell struct {
	Code string `json:"code"`
	// BudgetMS is how long the request waits for the cell before it detaches and answers
	// with the job id. Nil: 60 s. Zero or less: detach at once.
	BudgetMS *int64 `json:"budget_ms,omitempty"`
	// TimeoutMS is the cell's own deadline, kept by the kernel: past it the cell is
	// interrupted (Cell.Reason "timeout"), also after the request detached. Nil, zero or
	// less: none.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
}

// CellReply is the outcome of a cell: settled (Cell or Error set) or backgrounded (Job
// to wait on, stop, or read the output of).
type CellReply struct {
	// State is "settled" or "backgrounded" (the cell outlived the request's budget and runs
	// on in the background: read it with GET /sessions/{id}/cells/{cell}, or wait for its
	// end on GET /sessions/{id}/events), or for a retried Idempotency-Key whose cell was
	// sent to a kernel that is gone, "unknown" (Error says so; it is never run again). A
	// read of a cell still running (GET /sessions/{id}/cells/{cell}) is "running".
	State string `json:"state"`
	// Job is the id of the job that tracks the cell.
	Job string `json:"job"`
	// CellID is the cell's id (GET /sessions/{id}/cells/{cell} reads it by this or by
	// Job); absent for a cell sent under an Idempotency-Key.
	CellID string `json:"cell_id,omitempty"`
	// Cell is how the cell ended, when it settled with its own end.
	Cell *Cell `json:"cell,omitempty"`
	// Error says why a settled cell ended without its own end (its kernel ended).
	Error *Error `json:"error,omitempty"`
	// Output is the cell's output so far, bounded by the session's limits.
	Output Output `json:"output"`
	// Upgrade, when set, says that the session's stale kernel was replaced just before
	// this cell ran, and what of its namespace was carried over.
	Upgrade *Upgrade `json:"upgrade,omitempty"`
	// Lost, when set, says that the session's kernel had been lost (a restart found it
	// gone, with the reason) and that this cell ran in a fresh one: the namespace before
	// it is gone.
	Lost *string `json:"lost,omitempty"`
}

// Cell is how a cell ended.
type Cell struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Result is the repr of the final expression, or null.
	Result *string `json:"result"`
	// Exception is the exception of a cell with status "error".
	Exception *Exception `json:"exception,omitempty"`
	// Reason says why the kernel itself interrupted the cell: "memory" when the kernel's
	// memory passed the session's cap (its namespace is kept); absent otherwise.
	Reason string `json:"reason,omitempty"`
	// Note, with Reason, names what the namespace holds and the cap, for people.
	Note string `json:"note,omitempty"`
}

// Exception is a cell's Python exception.
type Exception struct {
	Name      string `json:"ename"`
	Value     string `json:"evalue"`
	Traceback string `json:"traceback"`
}

// Output is a bounded output: the kept window and what was dropped.
type Output struct {
	// Text is the kept window, decoded as UTF-8 (bad bytes become U+FFFD).
	Text         string `json:"text"`
	TotalBytes   int64  `json:"total_bytes"`
	TotalLines   int64  `json:"total_lines"`
	DroppedBytes int64  `json:"dropped_bytes"`
	DroppedLines int64  `json:"dropped_lines"`
	// Notice is the truncation notice, "" when nothing was dropped.
	Notice string `json:"notice,omitempty"`
}

// Event is one line of a streamed cell reply (Accept: application/x-ndjson). Type is
// "stream" (Name, Text), "display" (Data), "dropped" (Bytes of output the stream could
// not keep up with; the final Output still has them), or "result" (Result, the last
// line).
type Event struct {
	Type   string          `json:"type"`
	Name   string          `json:"name,omitempty"`
	Text   string          `json:"text,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
	Bytes  int64           `json:"bytes,omitempty"`
	Result *CellReply      `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// RunJob is the body of POST /sessions/{id}/jobs: a shell command run as a job.
type RunJob struct {
	Command string `json:"command"`
}

// Job is one job of a session (GET /sessions/{id}/jobs).
type Job struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	PID     *int   `json:"pid"`
	// StartedAt is Unix milliseconds.
	StartedAt int64 `json:"started_at"`
	// State is "running" or "ended", or "unknown" for a job an earlier daemon saw start
	// and not end that no later daemon could pick up (its record names no way to read it
	// again): it may have ended or run on, unseen. A job a restarted daemon picks up from
	// its record (its kernel resumed) is "running" until it ends there.
	State string `json:"state"`
	// End is how the job ended, nil while it runs.
	End *JobEnd `json:"end"`
}

// JobEnd is how a job ended.
type JobEnd struct {
	ExitCode *int `json:"exit_code"`
	Signal   *int `json:"signal"`
	Killed   bool `json:"killed"`
	// Interrupted: a cell job its interrupt ended (KeyboardInterrupt); its kernel goes
	// on, ExitCode and Signal are null and Killed is false.
	Interrupted bool `json:"interrupted"`
	// Text reads "exit 0", "signal 9 (killed)", "interrupted", "unknown".
	Text string `json:"text"`
}

// JobList is the body of GET /sessions/{id}/jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
}

// OutputPage is one page of a job's output (GET /sessions/{id}/jobs/{job}/output).
type OutputPage struct {
	Offset int64 `json:"offset"`
	// Data is the exact bytes (base64 in JSON).
	Data []byte `json:"data"`
	// Seen is how many bytes had been written when the page was read.
	Seen int64 `json:"seen"`
	// EOF: the job ended and the page reaches its last byte. More: the job still runs and
	// a later read at Offset+len(Data) may return more.
	EOF  bool `json:"eof"`
	More bool `json:"more"`
}

// StopReply is the body of a confirmed POST /sessions/{id}/jobs/{job}/stop.
type StopReply struct {
	Job Job `json:"job"`
}

// CreateChild is the body of POST /sessions/{id}/children.
type CreateChild struct {
	// ID names the child's workspace ([A-Za-z0-9._-], 1 to 64 bytes); "" picks one.
	ID string `json:"id,omitempty"`
	// Limits bound the child session's output; nil: the parent's.
	Limits *Limits `json:"limits,omitempty"`
}

// Child is a child session in its isolated workspace.
type Child struct {
	Session Session `json:"session"`
	// WorkspaceID and WorkspaceDir name the workspace; the child's cwd is its copy.
	WorkspaceID  string `json:"workspace_id"`
	WorkspaceDir string `json:"workspace_dir"`
	Files        int    `json:"files"`
}

// HandBack is the outcome of POST /sessions/{id}/children/{child}/handback.
type HandBack struct {
	ID        string     `json:"id"`
	Parent    string     `json:"parent"`
	Unchanged int        `json:"unchanged"`
	Taken     []string   `json:"taken"`
	Removed   []string   `json:"removed"`
	Conflicts []Conflict `json:"conflicts"`
	Repeat    bool       `json:"repeat"`
}

// Conflict is one path where the parent's entry was kept.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	Saved  string `json:"saved,omitempty"`
}

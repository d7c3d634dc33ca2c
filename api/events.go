package api

// SessionEvent is one line of GET /sessions/{id}/events (newline-delimited JSON): a
// change of the session a client waits for without polling. Type is "cell" (a cell ended:
// CellID, Job, End, and Cell with its result when the kernel answered it, else Error),
// "job" (a shell job ended: Job, End, Error when it ended without its own end), "kernel"
// (the kernel's State changed: "running" with PID, "ended" with Error, "reattaching"),
// or "dropped" (the client fell more than 4096 events behind: Dropped were lost; read
// the cells and jobs by id).
type SessionEvent struct {
	// Seq numbers the session's events from 1 in this daemon, in order.
	Seq  uint64 `json:"seq"`
	Type string `json:"type"`
	// At is Unix milliseconds.
	At     int64  `json:"at"`
	CellID string `json:"cell_id,omitempty"`
	Cell   *Cell  `json:"cell,omitempty"`
	Job    string `json:"job,omitempty"`
	// End is how the cell's or shell job's job ended.
	End     *JobEnd `json:"end,omitempty"`
	Error   *Error  `json:"error,omitempty"`
	State   string  `json:"state,omitempty"`
	PID     *int    `json:"pid,omitempty"`
	Dropped uint64  `json:"dropped,omitempty"`
}

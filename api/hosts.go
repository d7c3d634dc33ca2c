package api

// HostStatus is what the daemon knows of a host reached over ssh (HostState.Status).
type HostStatus string

// The statuses of a host. The last four are a probe's answers (package transports/ssh's
// Status values, same spelling); the first two are the daemon's own.
const (
	// HostUnknown: the daemon holds no answer for the host and no probe of it runs (never
	// probed, or its record was dropped to make room), and its ssh connections hold no
	// fresh answer of their own (a session's start probes its host). Reading the state
	// never probes: POST /hosts/{host}/probe does.
	HostUnknown HostStatus = "unknown"
	// HostProbing: a probe of the host is in flight; poll until the status is another.
	HostProbing HostStatus = "probing"
	// HostReady: the host runs kernels (python3 new enough); OS, Arch, Home, Cores and
	// Python are set.
	HostReady HostStatus = "ready"
	// HostUnsupported: the host answered but cannot run kernels (no python3, or one too
	// old); what it answered is set, Hint says what is missing.
	HostUnsupported HostStatus = "unsupported"
	// HostNeedsAuth: a person could get in but the daemon cannot on its own (every key
	// refused, a key that needs a passphrase, an unknown or changed host key); Hint says
	// what failed and SignIn how to sign in.
	HostNeedsAuth HostStatus = "needs_auth"
	// HostUnreachable: no ssh conversation could be had (refused, timed out, no route, a
	// name that does not resolve), or the probe did not end within its bound.
	HostUnreachable HostStatus = "unreachable"
)

// Settled reports whether s is a probe's answer (ready, unsupported, needs_auth or
// unreachable): a poller that waits for a probe stops at a status that is not probing.
func (s HostStatus) Settled() bool {
	switch s {
	case HostReady, HostUnsupported, HostNeedsAuth, HostUnreachable:
		return true
	}
	return false
}

// HostState is the daemon's state of one host: the body of GET /hosts?target={host} and
// of POST /hosts/{host}/probe's 202. The fields after Status describe the last answer
// and are absent (zero) while the status is unknown or probing; those the host reports
// (OS to Staged) are set when it answered (ready, unsupported).
type HostState struct {
	// Target is the host as resolved through the daemon's ssh config: "user@host:port",
	// host as named.
	Target string `json:"target"`
	// Status is what the daemon knows (HostUnknown, HostProbing, or a probe's answer).
	Status HostStatus `json:"status"`
	// OS and Arch are the host's `uname -s` and `uname -m`.
	OS   string `json:"os,omitempty"`
	Arch string `json:"arch,omitempty"`
	// Home is the login user's home directory on the host.
	Home string `json:"home,omitempty"`
	// Cores is the number of online processors (0: unknown).
	Cores int `json:"cores,omitempty"`
	// Python is python3's version ("3.11.2"); PythonPath the interpreter's absolute path.
	Python     string `json:"python,omitempty"`
	PythonPath string `json:"python_path,omitempty"`
	// Bundle is the kernel bundle's hash the probe asked about; Staged reports that the
	// host holds it, complete (~/.kennel-remote/<Bundle>/).
	Bundle string `json:"bundle,omitempty"`
	Staged bool   `json:"staged"`
	// Hint is, for any answer but ready, what went wrong and what a person can do: the
	// probe's own words made safe: valid UTF-8 without control characters, at most
	// MaxHint bytes (the start and the end of a longer text, around " … "). It names
	// hosts, addresses, users, file paths and public-key fingerprints, never key
	// material; of a remote command's stderr it holds at most the last three lines.
	Hint string `json:"hint,omitempty"`
	// SignIn is, for needs_auth, the command to run as the daemon's user on the daemon's
	// machine to sign in by hand ("ssh -p 2222 me@host"): ssh asks there for what it
	// needs (a host key to trust, a passphrase).
	SignIn string `json:"sign_in,omitempty"`
	// ProbedAt is when the answer was found (Unix milliseconds).
	ProbedAt int64 `json:"probed_at,omitempty"`
	// FreshUntil is until when (Unix milliseconds) the answer is reused instead of
	// reaching the host again: a minute after ProbedAt for ready and unsupported, five
	// seconds for needs_auth and unreachable. A state read later still shows the answer.
	FreshUntil int64 `json:"fresh_until,omitempty"`
}

// MaxHint is the most bytes of HostState.Hint.
const MaxHint = 1024

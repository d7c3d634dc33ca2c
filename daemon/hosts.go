package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/transports/ssh"
)

// HostProbeTimeout bounds a probe the daemon runs for POST /hosts/{host}/probe: one that
// has not answered by then is unreachable. The ssh package's own bound on a probe
// (2 × ssh.ConnectTimeout) is shorter, so in practice that one ends it.
const HostProbeTimeout = 30 * time.Second

// maxHostRecords bounds the hosts the daemon keeps a state of, and so the probes in
// flight: a probe of one more host drops the record of the host answered longest ago,
// and is refused (503 unavailable) when every record has a probe in flight.
const maxHostRecords = 256

// hostProbes serves GET /hosts and POST /hosts/{host}/probe from the ssh connections of
// the daemon's Kit: a record per resolved host (ssh.Target.Key) of its last answer and
// whether a probe of it runs. A probe in flight is joined, never started twice; a read
// never starts one, and answers, for a host the daemon holds no newer answer of, what
// the Kit's Hosts probed on its own (ssh.Hosts.Cached: a session's start). The probes
// run until close, which ends those in flight. It is safe for concurrent use.
type hostProbes struct {
	kit func() *launch.Kit // the daemon's Kit, read at each request

	// life is the context the probes run under: close ends it (its cause
	// errProbesEnded), so no probe outlives the server.
	life    context.Context
	endLife context.CancelCauseFunc
	running sync.WaitGroup // the probes in flight

	mu      sync.Mutex
	closed  bool // close was called: no probe starts
	records map[string]*hostRecord
}

// hostRecord is what the daemon knows of one host. hostProbes.mu guards it.
type hostRecord struct {
	target  string     // the host as last resolved ("user@host:port")
	running bool       // a probe of the host is in flight
	last    *ssh.Probe // the last answer; nil before the first
}

// errProbesEnded is why the host probes in flight at shutdown end (a cause, not a
// class: the probe's error is ssh.ErrUnreachable).
var errProbesEnded = errors.New("the daemon is shutting down")

func newHostProbes(kit func() *launch.Kit) *hostProbes {
	hp := &hostProbes{kit: kit, records: map[string]*hostRecord{}}
	hp.life, hp.endLife = context.WithCancelCause(context.Background())
	return hp
}

// close ends the probes in flight (each records an unreachable answer naming the
// shutdown) and waits for their ends; a probe asked for afterwards is refused (503
// unavailable). It may be called more than once.
func (hp *hostProbes) close() {
	hp.mu.Lock()
	hp.closed = true
	hp.mu.Unlock()
	hp.endLife(errProbesEnded)
	hp.running.Wait()
}

// resolve returns the daemon's ssh hosts and unsafeTarget resolved through their ssh
// config; a target that is not [user@]host[:port] is 400 invalid.
func (hp *hostProbes) resolve(unsafeTarget string) (*ssh.Hosts, ssh.Target, error) {
	hosts, err := hp.kit().Hosts()
	if err != nil {
		return nil, ssh.Target{}, fmt.Errorf("ssh hosts: %w", err)
	}
	t, err := hosts.Resolve(unsafeTarget)
	if errors.Is(err, ssh.ErrInvalidTarget) {
		// The message quotes the target: safeHint bounds it.
		return nil, ssh.Target{}, &api.Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: safeHint(err.Error())}
	}
	if err != nil {
		return nil, ssh.Target{}, fmt.Errorf("resolve host: %w", err)
	}
	return hosts, t, nil
}

// state returns the daemon's state of unsafeTarget without probing it: probing while a
// probe of the daemon's runs, else the newer of the daemon's last answer and the fresh
// answer the Kit's Hosts holds (ssh.Hosts.Cached), else unknown.
func (hp *hostProbes) state(unsafeTarget string) (api.HostState, error) {
	hosts, t, err := hp.resolve(unsafeTarget)
	if err != nil {
		return api.HostState{}, err
	}
	cached, ok := hosts.Cached(unsafeTarget)
	hp.mu.Lock()
	defer hp.mu.Unlock()
	rec := hp.records[t.Key()]
	switch {
	case rec != nil && rec.running:
		return rec.state(), nil
	case rec != nil && rec.last != nil && (!ok || !cached.At.After(rec.last.At)):
		return rec.state(), nil
	case ok:
		return HostState(cached), nil
	}
	return api.HostState{Target: t.String(), Status: api.HostUnknown}, nil
}

// probe starts a probe of unsafeTarget, or joins the one in flight, and returns the
// host's state (probing).
func (hp *hostProbes) probe(unsafeTarget string) (api.HostState, error) {
	hosts, t, err := hp.resolve(unsafeTarget)
	if err != nil {
		return api.HostState{}, err
	}
	key := t.Key()
	hp.mu.Lock()
	defer hp.mu.Unlock()
	if hp.closed {
		return api.HostState{}, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
			Message: fmt.Sprintf("probe %s: %v", t, errProbesEnded)}
	}
	rec := hp.records[key]
	if rec == nil {
		if !hp.makeRoom() {
			return api.HostState{}, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
				Message: fmt.Sprintf("probe %s: %d hosts are being probed, the most the daemon runs at once: try again once one has answered", t, maxHostRecords)}
		}
		rec = &hostRecord{}
		hp.records[key] = rec
	}
	rec.target = t.String()
	if !rec.running {
		rec.running = true
		// The probe is every caller's: no one request's end cancels it; close does.
		hp.running.Go(func() { hp.run(hosts, unsafeTarget, rec) })
	}
	return rec.state(), nil
}

// run probes target within HostProbeTimeout (or until close) and records the answer in
// rec.
func (hp *hostProbes) run(hosts *ssh.Hosts, target string, rec *hostRecord) {
	ctx, cancel := context.WithTimeout(hp.life, HostProbeTimeout)
	defer cancel()
	p := hosts.Probe(ctx, target)
	hp.mu.Lock()
	defer hp.mu.Unlock()
	rec.running, rec.last = false, &p
}

// makeRoom makes room for one more record when the daemon holds maxHostRecords: it drops
// the one answered longest ago among those with no probe in flight. It reports false
// when every record has a probe in flight. hp.mu is held.
func (hp *hostProbes) makeRoom() bool {
	if len(hp.records) < maxHostRecords {
		return true
	}
	oldest := ""
	for k, r := range hp.records {
		if r.running {
			continue
		}
		if oldest == "" || r.last.At.Before(hp.records[oldest].last.At) {
			oldest = k
		}
	}
	if oldest == "" {
		return false
	}
	delete(hp.records, oldest)
	return true
}

// state is rec as the API shows it. hp.mu is held.
func (rec *hostRecord) state() api.HostState {
	if rec.running {
		return api.HostState{Target: rec.target, Status: api.HostProbing}
	}
	if rec.last == nil {
		return api.HostState{Target: rec.target, Status: api.HostUnknown}
	}
	return HostState(*rec.last)
}

func (hp *hostProbes) handleGet(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, &api.Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: "GET /hosts: the query: " + err.Error()})
		return
	}
	if ts := q["target"]; len(ts) != 1 || ts[0] == "" {
		writeError(w, &api.Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: "GET /hosts: name one host as ?target=[user@]host[:port]"})
		return
	}
	st, err := hp.state(q.Get("target"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (hp *hostProbes) handleProbe(w http.ResponseWriter, r *http.Request) {
	st, err := hp.probe(r.PathValue("host"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, st)
}

// HostState is p as the API shows it (api.HostState): its answer, the hint made safe
// (valid UTF-8, control and format characters replaced by spaces, at most api.MaxHint
// bytes: the start and the end of a longer hint), the command that signs in by hand for
// needs_auth, and until when the ssh package reuses the answer (ssh.ReadyTTL for ready
// and unsupported, ssh.FailureTTL for failures).
func HostState(p ssh.Probe) api.HostState {
	st := api.HostState{
		Target: p.Target, Status: api.HostStatus(p.Status),
		OS: p.OS, Arch: p.Arch, Home: p.Home, Cores: p.Cores,
		Python: p.Python, PythonPath: p.PythonPath, Bundle: p.Bundle, Staged: p.Staged,
	}
	if p.Status != ssh.StatusReady {
		st.Hint = safeHint(p.Hint)
	}
	if p.Status == ssh.StatusNeedsAuth {
		st.SignIn = ssh.SignIn(p.Target)
	}
	if !p.At.IsZero() {
		ttl := ssh.ReadyTTL
		if p.Status == ssh.StatusNeedsAuth || p.Status == ssh.StatusUnreachable {
			ttl = ssh.FailureTTL
		}
		st.ProbedAt, st.FreshUntil = p.At.UnixMilli(), p.At.Add(ttl).UnixMilli()
	}
	return st
}

// hintEllipsis joins the start and the end of a hint cut to api.MaxHint bytes.
const hintEllipsis = " … "

// safeHint makes a diagnostic safe to show and to keep: invalid UTF-8 becomes U+FFFD,
// control and format characters (escapes, bidirectional overrides) become spaces, and a
// text over api.MaxHint bytes keeps its first three quarters and its last quarter of
// that, around " … ". It does not look for secrets: the ssh package's hints hold none
// (host names, users, addresses, file paths, public-key fingerprints, and at most the
// last three lines of a remote command's stderr).
func safeHint(unsafeText string) string {
	s := strings.Map(func(r rune) rune {
		if unicode.In(r, unicode.Cc, unicode.Cf) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(unsafeText, "\uFFFD"))
	if len(s) <= api.MaxHint {
		return s
	}
	budget := api.MaxHint - len(hintEllipsis)
	head := budget * 3 / 4
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - (budget - head)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + hintEllipsis + s[tail:]
}

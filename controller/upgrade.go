package controller

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/protocol"
)

// ErrUpgradeFailed: a stale kernel could not be replaced; it goes on serving the session.
var ErrUpgradeFailed = errdefs.ErrUnavailable.WithMessage("kernel upgrade failed")

// ErrBusy: the kernel runs a cell or a job, and the operation needs it idle.
var ErrBusy = errdefs.ErrConflict.WithMessage("kernel busy")

// UpgradeNotice says what replacing a stale kernel carried over to its replacement: the
// names of the namespace's values that came across (picklable values, and modules by
// name) and those that did not.
type UpgradeNotice struct {
	// From and To are the stub bundles of the old and the new kernel.
	From, To string
	// Carried and Left name the namespace's values carried over and left behind.
	Carried, Left []string
}

// Stale reports whether the session's kernel runs another stub bundle than this
// controller's: a kernel resumed after an upgrade of the controller. A stale kernel keeps
// serving; at its next idle moment (the next cell, with no cell or job live) it is
// replaced (Upgrade).
func (s *Session) Stale() bool {
	kc := s.cur.Load()
	return kc != nil && !kc.ended() && kc.stale.Load()
}

// Upgrade replaces the session's kernel with a fresh one of this controller's bundle,
// carrying the namespace's picklable values over: the old kernel's values are pickled
// (a snapshot cell), a new kernel starts beside it and unpickles them (a restore cell),
// then the old kernel is stopped. It needs the kernel idle (ErrBusy otherwise). On any
// failure the old kernel stays and serves on (ErrUpgradeFailed); a replacement that
// boots stale itself is refused (ErrStale) rather than replaced again.
func (s *Session) Upgrade(ctx context.Context) (*UpgradeNotice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("session %s: %w", s.id, s.closedErr())
	}
	return s.upgradeLocked(ctx)
}

// upgradeLocked is Upgrade with s.mu held.
func (s *Session) upgradeLocked(ctx context.Context) (*UpgradeNotice, error) {
	old := s.kc
	if old == nil || old.ended() {
		return nil, fmt.Errorf("upgrade: no kernel runs: %w", errdefs.ErrFailedPrecondition)
	}
	if !old.idle() {
		return nil, fmt.Errorf("upgrade: %w: a cell or a job runs", ErrBusy)
	}
	snap, err := old.internal(ctx, snapshotCode)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot of the namespace: %w", ErrUpgradeFailed, err)
	}
	nk, err := s.startKernel(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUpgradeFailed, err)
	}
	out, err := nk.internal(ctx, "__kennel_snapshot = "+quotePy(snap)+"\n"+restoreCode)
	var names struct{ Carried, Left []string }
	if err == nil {
		var raw []byte
		if raw, err = base64.StdEncoding.DecodeString(out); err == nil {
			err = json.Unmarshal(raw, &names)
		}
	}
	if err != nil {
		_ = nk.kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: restore of the namespace: %w", ErrUpgradeFailed, err)
	}
	s.kc = nk
	s.cur.Store(nk)
	go func() {
		if err := old.kill(context.Background()); err != nil {
			s.log.Warn("stopping the replaced kernel", "err", err)
		}
	}()
	n := &UpgradeNotice{From: old.hello.Bundle, To: nk.hello.Bundle, Carried: names.Carried, Left: names.Left}
	s.log.Info("stale kernel replaced", "from", n.From, "to", n.To, "carried", len(n.Carried), "left", n.Left)
	return n, nil
}

// upgradeIfStale replaces a stale, idle kernel at the start of a cell (the next idle
// moment), once: a failure leaves the old kernel serving and is not tried again but by
// Upgrade. s.mu is held; the notice waits for the cell's result (cellResult).
func (s *Session) upgradeIfStale(ctx context.Context, kc *kernelConn) *kernelConn {
	if !kc.stale.Load() || kc.upgradeTried || !kc.idle() {
		return kc
	}
	kc.upgradeTried = true
	n, err := s.upgradeLocked(ctx)
	if err != nil {
		s.log.Warn("the stale kernel was not replaced; it serves on", "err", err)
		return kc
	}
	s.originMu.Lock()
	s.notice = n
	s.originMu.Unlock()
	return s.kc
}

// cellResult is the result of cell id, ended by d, with the notices not yet reported
// (an upgrade's, a lost kernel's), each given once. It takes only the small lock: a
// kernel's reader calls it.
func (s *Session) cellResult(id string, d *protocol.Done) *CellResult {
	s.originMu.Lock()
	defer s.originMu.Unlock()
	res := &CellResult{ID: id, Status: d.Status, Result: d.Result, Error: d.Error, Reason: d.Reason, Note: d.Note, Upgrade: s.notice, Lost: s.lostNotice}
	s.notice, s.lostNotice = nil, ""
	return res
}

// idle reports that no cell runs on the kernel and no job of the session is live.
func (kc *kernelConn) idle() bool {
	kc.mu.Lock()
	cells := len(kc.cells)
	kc.mu.Unlock()
	return cells == 0 && len(kc.s.jobs.table.Live()) == 0
}

// internal runs code as a cell of the controller's own, its output dropped, and returns
// the str its final expression evaluates to (a base64 or JSON text: its repr is that
// text in single quotes).
func (kc *kernelConn) internal(ctx context.Context, code string) (string, error) {
	id := kc.s.nextID("c")
	c := &cellRun{done: make(chan struct{})}
	if err := track(kc, &kc.cells, id, c); err != nil {
		return "", err
	}
	if err := kc.writeFrame(ctx, protocol.Execute{ID: id, Code: code}); err != nil {
		lookup(kc, &kc.cells, id, true)
		return "", err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		_ = kc.interrupt(id)
		return "", context.Cause(ctx)
	}
	if c.err != nil {
		return "", c.err
	}
	if c.res.Status != "ok" || c.res.Result == nil {
		if e := c.res.Error; e != nil {
			return "", fmt.Errorf("%s: %s", e.EName, e.EValue)
		}
		return "", fmt.Errorf("internal cell ended %s without a value", c.res.Status)
	}
	r := *c.res.Result
	if len(r) < 2 || r[0] != '\'' || r[len(r)-1] != '\'' || strings.ContainsAny(r[1:len(r)-1], "'\\") {
		return "", errors.New("internal cell's value is not a plain str")
	}
	return r[1 : len(r)-1], nil
}

// quotePy is s (base64 text) as a Python str literal.
func quotePy(s string) string {
	if _, err := base64.StdEncoding.DecodeString(s); err != nil {
		return "''"
	}
	return "'" + s + "'"
}

// snapshotCode pickles the namespace's values (names not starting with "_"): each value
// on its own, so one that cannot be pickled is named and left, and modules by name. Its
// value is the base64 of the pickle of (values, modules, left). It leaves no name behind
// but the cell's own bookkeeping.
const snapshotCode = `def __kennel_snapshot(ns):
    import base64, pickle, types
    values, modules, left = {}, {}, []
    for k, v in list(ns.items()):
        if k.startswith("_"):
            continue
        if isinstance(v, types.ModuleType):
            modules[k] = v.__name__
            continue
        try:
            values[k] = pickle.dumps(v)
        except Exception:
            left.append(k)
    return base64.b64encode(pickle.dumps((values, modules, left))).decode()
(globals().pop("__kennel_snapshot"))(globals())`

// restoreCode follows the assignment of __kennel_snapshot: it unpickles each value (one
// that does not unpickle here is left), imports the modules, and evaluates to the JSON of
// {"Carried": [...], "Left": [...]}, sorted, removing its own names.
const restoreCode = `def __kennel_restore(ns, blob):
    import base64, importlib, json, pickle
    values, modules, left = pickle.loads(base64.b64decode(blob))
    carried = []
    for k, name in modules.items():
        try:
            ns[k] = importlib.import_module(name)
            carried.append(k)
        except Exception:
            left.append(k)
    for k, b in values.items():
        try:
            ns[k] = pickle.loads(b)
            carried.append(k)
        except Exception:
            left.append(k)
    return base64.b64encode(json.dumps({"Carried": sorted(carried), "Left": sorted(left)}).encode()).decode()
(globals().pop("__kennel_restore"))(globals(), globals().pop("__kennel_snapshot"))`

package ssh

import "context"

// StageCommand is the staging command line, for tests that drive it by hand.
func StageCommand() string { return loginCommand(stageScript) }

// BundleTar is bundleTar, for tests.
var BundleTar = bundleTar

// Control runs the control command (control.py) for runID on target with action, as a
// kernel's Kill and sweep do, and returns what it printed.
func Control(ctx context.Context, h *Hosts, target, runID, action string) (string, error) {
	t, err := h.Resolve(target)
	if err != nil {
		return "", err
	}
	p := h.Probe(ctx, target)
	if p.Status != StatusReady {
		return "", p.Err
	}
	return h.control(ctx, t, p.PythonPath, runID, action)
}

package images

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// hostEndRace plays a host reply that comes in on another thread while the kernel's end
// fails every pending request: between close's snapshot of the requests and its clear.
// It prints how the request was settled, or the error close raised.
const hostEndRace = `
import sys, threading
sys.path.insert(0, sys.argv[1])
from kennel import _host

class Writer:
    def log(self, level, message):
        pass

class Kernel:
    main_ident = threading.get_ident()
    writer = Writer()
    def wake_main(self):
        pass

requests = _host.Requests(Kernel())
replier = []

class Racing(dict):
    def clear(self):
        t = threading.Thread(target=requests.reply, args=({"id": "h1", "status": "ok", "result": 1},))
        replier.append(t)
        t.start()
        t.join(0.5)  # the reply runs now, unless it must wait for close
        dict.clear(self)

pending = _host._Pending(False)
requests._pending = Racing(h1=pending)
try:
    requests.close()
except BaseException as exc:
    print("close raised %s: %s" % (type(exc).__name__, exc))
replier[0].join()
print("settled", pending.status)
`

// TestHostReplyRacingTheEndSettlesOnce: a reply that races the kernel's end settles its
// request once. Settled twice, the end itself raised (releasing an unlocked lock): in a
// SIGTERM's end that killed the signal thread, so the kernel never exited on SIGTERM.
func TestHostReplyRacingTheEndSettlesOnce(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	_, dir := stubDir(t)
	out, err := exec.Command(python, "-I", "-S", "-c", hostEndRace, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("race script: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	if got != "settled closed" && got != "settled ok" {
		t.Errorf("race script printed:\n%s\nwant the request settled once, close raising nothing", got)
	}
}

// breakClose makes the kernel's first step of an end (failing pending host requests)
// raise, as a reply settling a request twice once made it.
const breakClose = "def _broken():\n    raise RuntimeError('injected')\nkennel._rt.host.close = _broken\n"

// TestAnEndWhoseStepFailsStillExits: an error in the steps of an end does not lose the
// exit. Before, a SIGTERM's end that raised killed the signal thread (the kernel never
// exited on SIGTERM), and a graceful one never exited at all.
func TestAnEndWhoseStepFailsStillExits(t *testing.T) {
	t.Parallel()
	t.Run("SIGTERM during a busy cell", func(t *testing.T) {
		t.Parallel()
		k := startKernel(t, kernelOpts{})
		k.startCell("c1", breakClose+"print('go')\nwhile True:\n    pass")
		if err := k.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, took := k.exitWithin(termBound); code != 143 {
			t.Errorf("exit code = %d %v after SIGTERM, want 143", code, took)
		}
	})
	t.Run("stdin EOF", func(t *testing.T) {
		t.Parallel()
		k := startKernel(t, kernelOpts{})
		k.result("c1", breakClose)
		k.stdin.Close()
		if code, took := k.exitWithin(termBound); code != 0 {
			t.Errorf("exit code = %d %v after stdin EOF, want 0", code, took)
		}
	})
}

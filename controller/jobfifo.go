package controller

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/jobs"
)

// fifoBufSize is the read buffer of a job's FIFO reader and the pipe size asked of each
// FIFO (F_SETPIPE_SZ; a refusal leaves the default).
const fifoBufSize = 1 << 20

// jobFIFOs carry one shell job's stdout and stderr straight from the job's processes to
// its output, for a kernel that shares the host's file system: the controller makes two
// FIFOs in the session's private output directory, opens their read ends (non-blocking,
// so nothing waits for the kernel) and a write end of its own that holds off end of file
// until the kernel has opened its ends, then copies whatever arrives into the job. The
// bytes never pass through the kernel's Python or the frame channel.
//
// Life: newJobFIFOs (before job_run); release when the kernel has opened its ends
// (job_start) or will not (job_end, the job ended): the controller's write ends close and
// the paths are removed; done closes once both readers reached end of file; stop makes the
// readers return at once (a process that left the job holding a FIFO), after which done
// closes promptly. Bytes read before a stop are all in the job's output.
type jobFIFOs struct {
	paths   [2]string   // stdout, stderr, on the host
	named   [2]string   // the same as the kernel opens them (job_run's stdout, stderr)
	readers [2]*os.File // non-blocking, in the runtime poller
	done    chan struct{}

	mu      sync.Mutex
	holds   [2]int // the controller's write ends; -1 once closed
	removed bool
}

// newJobFIFOs makes the two FIFOs of a job in dir (names unique, 128 random bits), and
// starts a reader per FIFO copying into job through buffers from pool. kernelDir is
// where the kernel sees dir ("": at dir itself, a SameFS kernel; the FIFOs are then 0600);
// elsewhere the FIFOs are 0622, writable by a kernel of another uid (see prepareFIFODir).
// On an error nothing is left behind.
func newJobFIFOs(dir, kernelDir string, job *jobs.Job, pool *sync.Pool) (*jobFIFOs, error) {
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("make job fifos: %w", err)
	}
	name := "kennel-fifo-" + hex.EncodeToString(rnd[:])
	base := filepath.Join(dir, name)
	f := &jobFIFOs{
		paths: [2]string{base + "-stdout", base + "-stderr"},
		named: [2]string{base + "-stdout", base + "-stderr"},
		done:  make(chan struct{}),
		holds: [2]int{-1, -1},
	}
	mode := uint32(0o600)
	if kernelDir != "" {
		kbase := path.Join(kernelDir, name)
		f.named = [2]string{kbase + "-stdout", kbase + "-stderr"}
		mode = 0o622
	}
	if err := f.open(mode); err != nil {
		f.closeAll()
		return nil, err
	}
	var wg sync.WaitGroup
	for _, r := range f.readers {
		wg.Go(func() { copyFIFO(r, job, pool) })
	}
	go func() {
		wg.Wait()
		for _, r := range f.readers {
			_ = r.Close()
		}
		close(f.done)
	}()
	return f, nil
}

// open makes the FIFOs with mode (whatever the umask) and opens the read ends and the
// controller's write ends.
func (f *jobFIFOs) open(mode uint32) error {
	for i, p := range f.paths {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return fmt.Errorf("make job fifo %s: %w", p, err)
		}

		r, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open job fifo %s: %w", p, err)
		}
		f.readers[i] = r
		w, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open job fifo %s for writing: %w", p, err)
		}
		f.holds[i] = w
		if mode != 0o600 {
			if err := unix.Fchmod(w, mode); err != nil {
				return fmt.Errorf("chmod job fifo %s: %w", p, err)
			}
		}
		_, _ = unix.FcntlInt(uintptr(w), unix.F_SETPIPE_SZ, fifoBufSize)
	}
	return nil
}

// closeAll undoes a failed open.
func (f *jobFIFOs) closeAll() {
	f.release()
	for _, r := range f.readers {
		if r != nil {
			_ = r.Close()
		}
	}
}

// release closes the controller's write ends and removes the FIFOs' paths: from now on
// each reader ends when the last writer the kernel opened closes. It is idempotent.
func (f *jobFIFOs) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, w := range f.holds {
		if w >= 0 {
			_ = unix.Close(w)
			f.holds[i] = -1
		}
	}
	if !f.removed {
		f.removed = true
		for _, p := range f.paths {
			_ = os.Remove(p)
		}
	}
}

// stop releases the FIFOs and makes both readers return now, whoever still holds a write
// end; done closes once they have.
func (f *jobFIFOs) stop() {
	f.release()
	for _, r := range f.readers {
		_ = r.SetReadDeadline(time.Unix(1, 0))
	}
}

// drain releases the FIFOs and waits for both readers' end of file at most grace, then
// stops them and waits for them to return.
func (f *jobFIFOs) drain(grace time.Duration) {
	f.release()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-f.done:
		return
	case <-t.C:
	}
	f.stop()
	<-f.done
}

// copyFIFO copies r into job until end of file, a read deadline or an error. A buffer is
// taken from pool only for each read that has data, so an idle job holds none.
func copyFIFO(r *os.File, job *jobs.Job, pool *sync.Pool) {
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			bp := pool.Get().(*[]byte)
			defer pool.Put(bp)
			n, rerr = unix.Read(int(fd), *bp)
			if errors.Is(rerr, unix.EAGAIN) {
				return false // wait for the poller
			}
			if n > 0 {
				_ = job.Output((*bp)[:n]) // after the end: ignored and counted by the job
			}
			return true
		})
		if err != nil || rerr != nil && !errors.Is(rerr, unix.EINTR) || n == 0 && rerr == nil {
			return
		}
	}
}

// newFIFOPool returns the pool of FIFO read buffers of a session.
func newFIFOPool() *sync.Pool {
	return &sync.Pool{New: func() any {
		b := make([]byte, fifoBufSize)
		return &b
	}}
}

// fifoDirName is the directory inside a session's spill directory where the controller
// makes the FIFOs of a kernel that opens them through a mount (Info.FIFODir): a container
// on this host's kernel, given this directory and nothing else of the host.
const fifoDirName = "fifo"

// prepareFIFODir makes (or finds) spill's FIFO directory and returns it, mode 0711: the
// kernel's user, who may be another uid than the controller's, can open a FIFO in it by
// its name but cannot list, create, rename or remove anything there (the mount is
// read-only as well). Nobody else on the host reaches it: spill and its parents are the
// controller's, 0700. Its FIFOs are 0622 for the same reason: writable, not readable, by
// the kernel's user.
func prepareFIFODir(spill string) (string, error) {
	dir := filepath.Join(spill, fifoDirName)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("make job fifo dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("make job fifo dir: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("make job fifo dir %s: not a directory", dir)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", fmt.Errorf("make job fifo dir: %w", err)
	}
	return dir, nil
}

package controller

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/jobs"
)

// jobFileBufSize is the read buffer of a job's output files.
const jobFileBufSize = 1 << 20

// punchBlock is the granularity of the holes a tail punches in what it consumed: whole
// 64 KiB blocks (a multiple of any file system's block), so a hole never leaves zeroed
// bytes that read back as data.
const punchBlock = 64 << 10

// punchEvery is how much consumed output a tail lets gather before it punches it.
const punchEvery = 32 << 20

// jobFileNamePrefix begins the name of each job output file; 32 hex digits and
// -stdout or -stderr follow.
const jobFileNamePrefix = "kennel-out-"

// jobFiles carry one shell job's stdout and stderr straight from the job's processes to
// its output, for a kernel that shares the host's file system or sees the session's job
// output directory through a mount: two regular files the job appends to, which the
// controller tails. The bytes never pass through the kernel's Python or the frame channel,
// and no reader is needed for the job to write: a controller that dies costs the job
// nothing, and the next one (resumeJobFiles) reads the files again from their start.
//
// What the tail consumed past keep (the capture's retention from offset 0) is punched out
// of the files in whole blocks, so a file holds on disk its first keep bytes and what is
// not read yet; a later reader counts a punched range as lost (jobs.Job.Lost), so read
// plus lost is always what the job wrote.
//
// Life: newJobFiles (before job_run) or resumeJobFiles; end when the job ended (job_end):
// the tail reads both files to their end, removes them (unless keepAtEnd: then remove
// does, once the job's end is recorded) and closes done; stop makes the
// tail return at once and keeps the files (the kernel detached with the job running, or
// its kernel is gone and the session's end removes them). Bytes read before a stop are
// all in the job's output.
type jobFiles struct {
	paths [2]string // stdout, stderr, on the host
	named [2]string // the same as the kernel opens them (job_run's stdout, stderr)
	files [2]*os.File
	keep  int64
	done  chan struct{}
	// keepAtEnd leaves the files after the end until remove: a store records the job's
	// end first (Options.OnJob), so a controller that dies between leaves them to the next.
	keepAtEnd bool

	once    sync.Once
	ending  chan struct{}
	stopped chan struct{}
	stopMu  sync.Once
}

// newJobFiles makes the two output files of a job in dir (names unique, 128 random bits)
// and starts their tail into job. kernelDir is where the kernel sees dir ("": at dir
// itself, a SameFS kernel; the files are then 0600); elsewhere they are 0622, writable by a
// kernel of another uid (see prepareJobOutDir). On an error nothing is left behind.
func newJobFiles(dir, kernelDir string, keep int64, keepAtEnd bool, job *jobs.Job, pool *sync.Pool) (*jobFiles, error) {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:]) // never fails
	name := jobFileNamePrefix + hex.EncodeToString(rnd[:])
	f := newJobFilesAt(filepath.Join(dir, name), keep)
	f.keepAtEnd = keepAtEnd
	mode := uint32(0o600)
	if kernelDir != "" {
		kbase := path.Join(kernelDir, name)
		f.named = [2]string{kbase + "-stdout", kbase + "-stderr"}
		mode = 0o622
	}
	for i, p := range f.paths {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil && mode != 0o600 {
			if err = unix.Fchmod(fd, mode); err != nil {
				_ = unix.Close(fd)
			}
		}
		if err != nil {
			f.closeFiles(true)
			return nil, fmt.Errorf("make job output file %s: %w", p, err)
		}
		f.files[i] = os.NewFile(uintptr(fd), p)
	}
	go f.tail(job, pool)
	return f, nil
}

// resumeJobFiles opens the output files of a job an earlier controller started (paths:
// its host paths, names: as its kernel opened them) and starts their tail into job from
// their start, the ranges an earlier tail punched counted as lost (a hole is never read:
// tailState.read). Each must be a regular
// file of this process's uid, not a symlink, named as newJobFiles names them; a file
// missing is an error matching errdefs.ErrNotFound. On an error nothing is changed.
func resumeJobFiles(paths, named [2]string, keep int64, job *jobs.Job, pool *sync.Pool) (*jobFiles, error) {
	base, ok := strings.CutSuffix(paths[0], "-stdout")
	if !ok || paths[1] != base+"-stderr" || !validJobFileBase(filepath.Base(base)) {
		return nil, fmt.Errorf("resume job output %q: %w", paths, errdefs.ErrInvalidArgument.WithMessage("not a job's output files"))
	}
	f := newJobFilesAt(base, keep)
	f.named = named
	f.keepAtEnd = true // picked up from a store's record: its end is recorded first
	for i, p := range f.paths {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			f.closeFiles(false)
			if errors.Is(err, unix.ENOENT) {
				return nil, fmt.Errorf("resume job output %s: %w", p, errdefs.ErrNotFound.WithMessage("file gone"))
			}
			return nil, fmt.Errorf("resume job output %s: %w", p, err)
		}
		f.files[i] = os.NewFile(uintptr(fd), p)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
			f.closeFiles(false)
			return nil, fmt.Errorf("resume job output %s: %w", p, errdefs.ErrInvalidArgument.WithMessage("not a regular file of ours"))
		}
	}
	go f.tail(job, pool)
	return f, nil
}

func newJobFilesAt(base string, keep int64) *jobFiles {
	p := [2]string{base + "-stdout", base + "-stderr"}
	return &jobFiles{
		paths: p, named: p, keep: keep,
		done: make(chan struct{}), ending: make(chan struct{}), stopped: make(chan struct{}),
	}
}

// validJobFileBase reports whether name is jobFileNamePrefix and 32 lower-case hex digits.
func validJobFileBase(name string) bool {
	h, ok := strings.CutPrefix(name, jobFileNamePrefix)
	if !ok || len(h) != 32 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// closeFiles closes the files opened so far, removing them when remove is set.
func (f *jobFiles) closeFiles(remove bool) {
	for i, fl := range f.files {
		if fl != nil {
			_ = fl.Close()
			f.files[i] = nil
		}
		if remove {
			_ = os.Remove(f.paths[i])
		}
	}
}

// end says the job ended: the tail reads both files to their end, then removes them.
func (f *jobFiles) end() { f.once.Do(func() { close(f.ending) }) }

// stop makes the tail return now; the files stay. done closes once it has.
func (f *jobFiles) stop() { f.stopMu.Do(func() { close(f.stopped) }) }

// drain is end, waiting for the tail at most grace before it stops it.
func (f *jobFiles) drain(grace time.Duration) {
	f.end()
	if closedWithin(f.done, grace) {
		return
	}
	f.stop()
	<-f.done
}

// remove removes the files (once the job's end is recorded: keepAtEnd).
func (f *jobFiles) remove() {
	for _, p := range f.paths {
		_ = os.Remove(p)
	}
}

// tail copies both files into job until end (then to their end) or stop. At a file's end
// it waits, 1 ms at first and up to 64 ms while nothing arrives.
func (f *jobFiles) tail(job *jobs.Job, pool *sync.Pool) {
	defer close(f.done)
	var st [2]tailState
	for i := range st {
		st[i].punchFrom = (f.keep + punchBlock - 1) / punchBlock * punchBlock
		st[i].punched = st[i].punchFrom
	}
	wait := time.Millisecond
	timer := time.NewTimer(wait) // Reset before each wait: a tick not taken is dropped
	defer timer.Stop()
	ending := false
	for {
		got := false
		for i, fl := range f.files {
			n, err := st[i].read(fl, job, pool, f.keep > 0)
			got = got || n > 0
			if err != nil && !errors.Is(err, io.EOF) {
				st[i].broken = true // a file that cannot be read any more; its bytes so far are in
			}
		}
		if got {
			wait = time.Millisecond
			select {
			case <-f.stopped:
				f.closeFiles(false)
				return
			default:
			}
			continue
		}
		if ending {
			f.closeFiles(!f.keepAtEnd)
			return
		}
		timer.Reset(wait)
		select {
		case <-f.stopped:
			f.closeFiles(false)
			return
		case <-f.ending:
			ending = true // one more pass reads what was written before the end
		case <-timer.C:
			wait = min(2*wait, 64*time.Millisecond)
		}
	}
}

// tailState is where a tail is in one file.
type tailState struct {
	off       int64 // the next byte to read
	punchFrom int64 // keep, rounded up to a block: nothing below it is punched
	punched   int64 // [punchFrom, punched) is punched
	broken    bool  // reading failed; the file is left alone
}

// read reads the data the file holds past off into job, at most one buffer and never
// into a hole, and punches what it consumed past punchFrom when punch is set. It returns
// the bytes read and io.EOF at the file's end.
//
// A hole is never read (its zeros are not the job's bytes): one an earlier reader punched
// (a resumed job), or one a hostile kernel made (a pwrite far past the end, an ftruncate
// up), is skipped once data follows it, its length counted as lost, and a hole at the
// end is not read at all: a kernel cannot make the controller read a terabyte of zeros.
func (s *tailState) read(fl *os.File, job *jobs.Job, pool *sync.Pool, punch bool) (int, error) {
	if s.broken || fl == nil {
		return 0, io.EOF
	}
	fd := int(fl.Fd())
	d, err := unix.Seek(fd, s.off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return 0, io.EOF // no data at or after off: the end, or a hole up to it
	case err != nil: // no SEEK_DATA here: all of it is data
	case d > s.off:
		_ = job.Lost(d - s.off)
		s.off = d
		s.punched = max(s.punched, s.off/punchBlock*punchBlock)
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := *bp
	if h, err := unix.Seek(fd, s.off, unix.SEEK_HOLE); err == nil && h-s.off < int64(len(buf)) {
		buf = buf[:h-s.off]
	}
	n, err := fl.ReadAt(buf, s.off)
	if n > 0 {
		_ = job.Output(buf[:n]) // after the end: ignored and counted by the job
		s.off += int64(n)
		if punch {
			s.punch(fl)
		}
	}
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// punch gives back the disk of the whole blocks consumed past punchFrom, once punchEvery
// of them gathered. A file system that cannot punch is left alone from then on.
func (s *tailState) punch(fl *os.File) {
	to := s.off / punchBlock * punchBlock
	if to-s.punched < punchEvery {
		return
	}
	err := unix.Fallocate(int(fl.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, s.punched, to-s.punched)
	if err != nil {
		s.punched = 1<<63 - 1 // not supported here: stop trying
		return
	}
	s.punched = to
}

// newFilePool returns the pool of job output read buffers of a session.
func newFilePool() *sync.Pool {
	return &sync.Pool{New: func() any {
		b := make([]byte, jobFileBufSize)
		return &b
	}}
}

// jobOutDirName is the directory inside a session's spill directory where the controller
// makes the output files of a kernel that opens them through a mount (Info.JobOutDir): a
// container on this host, given this directory and nothing else of the host.
const jobOutDirName = "jobout"

// prepareJobOutDir makes (or finds) spill's job output directory and returns it, mode
// 0711: the kernel's user, who may be another uid than the controller's, can open a file
// in it by its name but cannot list, create, rename or remove anything there. Nobody else
// on the host reaches it: spill and its parents are the controller's, 0700. Its files are
// 0622 for the same reason: writable, not readable, by the kernel's user.
func prepareJobOutDir(spill string) (string, error) {
	dir := filepath.Join(spill, jobOutDirName)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("make job output dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("make job output dir: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("make job output dir %s: not a directory", dir)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", fmt.Errorf("make job output dir: %w", err)
	}
	return dir, nil
}

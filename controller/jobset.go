package controller

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
)

// DefaultStateDir is the state directory of a session whose Options.StateDir is empty:
// kennel-<euid> under os.TempDir().
func DefaultStateDir() string {
	return filepath.Join(os.TempDir(), "kennel-"+strconv.Itoa(os.Geteuid()))
}

// jobSet is a session's jobs: the table, where their spill files go, and the controller's
// record of each job the table still holds.
type jobSet struct {
	table     *jobs.Table
	outputDir string     // SaveOutput's files, shared by the sessions of one state directory
	spillDir  string     // this session's spill files and job output files, removed with the session
	jobOutDir string     // job output files a container kernel opens through a mount (see jobOutDirName); "" for none
	filePool  *sync.Pool // read buffers of jobs' output files (see jobFiles)
	keep      int64      // what a capture retains from offset 0: never punched from a job's files

	adopted []*jobRun // Options.ResumeJobs' jobs, until their kernel is resumed (s.mu)

	mu   sync.Mutex
	runs map[jobs.ID]*jobRun
	// pruneAt is the size of runs at which add forgets the runs of jobs the table
	// dropped; it doubles past what a prune keeps, so add costs O(1) amortized.
	pruneAt int
}

// minRunsPrune is the smallest pruneAt: twice the ended jobs a table keeps.
const minRunsPrune = 2 * jobs.DefaultRetain

// initJobs prepares the session's private output directories, prunes old saved output
// and abandoned spill directories (output.SpillKeep) and makes the job table. It runs
// before the first kernel.
func (s *Session) initJobs(ctx context.Context) error {
	if err := s.opts.Truncation.Validate(); err != nil {
		return fmt.Errorf("start session: %w", err)
	}
	s.opts.JobKillGrace = cmp.Or(s.opts.JobKillGrace, 2*time.Second)
	state := cmp.Or(s.opts.StateDir, DefaultStateDir())
	if err := output.PrepareDir(state); err != nil {
		return fmt.Errorf("start session: state dir: %w", err)
	}
	dir := filepath.Join(state, "output")
	if err := output.PrepareDir(dir); err != nil {
		return fmt.Errorf("start session: %w", err)
	}
	if n, err := output.Prune(ctx, dir, output.SpillKeep); err != nil {
		s.log.Warn("pruning old job output", "dir", dir, "removed", n, "err", err)
	} else if n > 0 {
		s.log.Debug("pruned old job output", "dir", dir, "removed", n)
	}
	if n, err := pruneSpillDirs(dir, output.SpillKeep); err != nil {
		s.log.Warn("pruning abandoned spill directories", "dir", dir, "removed", n, "err", err)
	}
	spill := filepath.Join(dir, spillDirPrefix+s.id)
	if err := output.PrepareDir(spill); err != nil {
		return fmt.Errorf("start session: %w", err)
	}
	jobOutDir := ""
	if !s.opts.Transport.Capabilities().SameFS {
		d, err := prepareJobOutDir(spill)
		if err != nil {
			s.log.Warn("job output goes through frames", "err", err)
		}
		jobOutDir = d
	}
	table, err := jobs.NewTable(jobs.TableOptions{
		Truncation: s.opts.Truncation,
		Capture:    output.CaptureOptions{SpillDir: spill},
		After:      jobs.ID(s.opts.IDBase),
	})
	if err != nil {
		_ = os.RemoveAll(spill)
		return fmt.Errorf("start session: %w", err)
	}
	s.jobs = jobSet{
		table: table, outputDir: dir, spillDir: spill, jobOutDir: jobOutDir, filePool: newFilePool(),
		keep: table.Retains(), runs: make(map[jobs.ID]*jobRun), pruneAt: minRunsPrune,
	}
	s.adoptJobs(s.opts.ResumeJobs)
	return nil
}

// Jobs returns the session's job table: its live jobs (Observe lists at most
// jobs.MaxObserved, in id order) and the ended jobs it keeps for reads of their output.
func (s *Session) Jobs() *jobs.Table { return s.jobs.table }

// OutputDir is the private directory where SaveOutput writes a job's full output; files
// there older than output.SpillKeep are pruned when a session starts. Spill files (the
// retained output of running and ended jobs) and job output files live in a directory of the
// session's own inside it, removed when the session ends.
func (s *Session) OutputDir() string { return s.jobs.outputDir }

// SpillDir is the session's own directory inside OutputDir: its jobs' spill files and
// output files. Close removes it once the session's kernels have ended.
func (s *Session) SpillDir() string { return s.jobs.spillDir }

// add records r. Once runs reaches pruneAt it forgets the runs of jobs the table dropped,
// so runs stays below twice what the table held at that prune (or minRunsPrune).
func (js *jobSet) add(r *jobRun) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.runs[r.job.ID()] = r
	if len(js.runs) < js.pruneAt {
		return
	}
	for id := range js.runs {
		if _, ok := js.table.Job(id); !ok {
			delete(js.runs, id)
		}
	}
	js.pruneAt = max(2*len(js.runs), minRunsPrune)
}

// get returns the run of job id while the table holds the job; a run the table dropped
// and add did not prune yet is forgotten here, so get answers as the table does.
func (js *jobSet) get(id jobs.ID) (*jobRun, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	r, ok := js.runs[id]
	if ok {
		if _, held := js.table.Job(id); !held { // evicted from the table: forget it here too
			delete(js.runs, id)
			ok = false
		}
	}
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
	}
	return r, nil
}

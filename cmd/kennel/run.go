package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/settings"
	"github.com/spf13/cobra"
)

// runFlags are the flags of `kennel run`.
type runFlags struct {
	codes      []string
	dir        string
	debug      bool
	sh         string        // --sh: a shell command to run as a job instead of cells
	budget     time.Duration // --budget: when a --sh job detaches (0: never)
	noTruncate bool          // --no-truncate: print every byte of a --sh job
	// transport says where the kernel runs, over the kernelTransport setting.
	transport transportFlags
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [-c CODE]... [FILE | -] | --sh CMD [--budget D] [--no-truncate]",
		Short: "Run Python cells, or a shell command, in a fresh local kernel",
		Long: `Run Python code as cells in a fresh kernel and stream its output.

Each -c is one cell; a FILE is one cell; "-" reads cells from stdin, separated by lines
that start with "# %%" (the percent format editors use). Cells share one namespace; the
value of a cell's last expression is printed. A failing cell prints its traceback and
kennel exits 1. Ctrl-C (SIGINT) or SIGTERM interrupts the running cell; a kernel that does
not stop within 5 s is killed; kennel exits 130 (SIGTERM: 143). A second signal kills the
kernel at once.

With --sh, kennel runs CMD with /bin/sh -c inside the sandbox as a job instead, and
prints its output (stdout and stderr together) as it arrives, bounded like every job's:
by the truncation setting (kennel config), by default the first 50 KiB and 2000 lines.
Past the bound it prints a notice on stderr saying how many bytes and lines were dropped
and where the full output was saved. --no-truncate prints every byte. kennel exits with the job's exit code (128+N when signal N ended it).
--budget D makes the job detach after D, as a blocking call does: kennel then says on
stderr that the job detached and keeps waiting for its end; it does not kill it.
Ctrl-C kills the job's process group and kennel exits 130.

The logLevel setting sets how much kennel logs to stderr (--debug: everything).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.sh != "" {
				if len(f.codes) > 0 || len(args) > 0 {
					return &exitError{code: 2, msg: "--sh runs one shell command: give no -c, FILE or -"}
				}
				return runShell(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if cmd.Flags().Changed("budget") || f.noTruncate {
				return &exitError{code: 2, msg: "--budget and --no-truncate go with --sh"}
			}
			cells, err := collectCells(f.codes, args, cmd.InOrStdin())
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			return runCells(cmd.Context(), f, cells, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVarP(&f.codes, "code", "c", nil, "a cell of Python code (repeatable)")
	cmd.Flags().StringVarP(&f.dir, "dir", "C", "", "the session's working directory (default: the current directory)")
	cmd.Flags().BoolVar(&f.debug, "debug", false, "log the controller's diagnostics to stderr")
	cmd.Flags().StringVar(&f.sh, "sh", "", "run this shell command (/bin/sh -c) in the sandbox as a job instead of cells")
	cmd.Flags().DurationVar(&f.budget, "budget", 0, "with --sh: detach the job after this long, say so and keep waiting (0: never)")
	addTransportFlags(cmd.Flags(), &f.transport)
	cmd.Flags().BoolVar(&f.noTruncate, "no-truncate", false, "with --sh: print every byte of the job's output (truncation off)")
	return cmd
}

// collectCells gathers the cells of a run: the -c cells in order, then FILE (one cell) or
// stdin ("-": cells split at "# %%" lines).
func collectCells(codes, args []string, stdin io.Reader) ([]string, error) {
	cells := append([]string(nil), codes...)
	if len(args) == 1 {
		if args[0] == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("read cells from stdin: %w", err)
			}
			cells = append(cells, splitCells(string(b))...)
		} else {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return nil, fmt.Errorf("read cell: %w", err)
			}
			cells = append(cells, string(b))
		}
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("nothing to run: give -c CODE, a FILE, or - for stdin")
	}
	return cells, nil
}

// splitCells splits text at lines starting with "# %%"; empty cells are dropped.
func splitCells(text string) []string {
	var cells []string
	var cur strings.Builder
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			cells = append(cells, cur.String())
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# %%") {
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	flush()
	return cells
}

// startSession starts a fresh session: where the flags say, else where the kernelTransport
// setting of the project at the working directory says (a local kernel by default), all
// assembled by package launch; end it with the returned func, which closes the session
// and releases what it held. Its outputs are bounded by the returned truncation: the
// truncation setting's (--no-truncate: none); it logs at the logLevel setting's level
// (--debug: everything). With --ssh the project is the remote host's: only the global
// settings apply, and -C is the remote working directory.
func startSession(ctx context.Context, f runFlags, stderr io.Writer) (*controller.Session, output.Truncation, func(), error) {
	dir := f.dir
	if f.transport.ssh == "" && dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, output.Truncation{}, nil, err
		}
		dir = wd
	}
	spec, r, err := f.transport.resolve(dir, f.dir)
	if r == nil {
		return nil, output.Truncation{}, nil, err
	}
	logger := newLogger(stderr, f.debug, r.Settings.LogLevel)
	for _, w := range launch.Problems(r) {
		logger.Warn("settings: " + w)
	}
	if err != nil {
		return nil, output.Truncation{}, nil, err
	}
	bundle, err := images.Stub()
	if err != nil {
		return nil, output.Truncation{}, nil, err
	}
	kit := launch.New(launch.Options{})
	parts, err := kit.Assemble(ctx, spec, dir)
	if err != nil {
		_ = kit.Close()
		return nil, output.Truncation{}, nil, err
	}
	release := func() {
		parts.Release()
		_ = kit.Close()
	}
	for _, w := range parts.Warnings {
		logger.Warn("settings: " + w)
	}
	truncation := runTruncation(f, r.Settings)
	var memory int64
	if m := r.Settings.KernelMemory; m != nil {
		memory = *m
	}
	s, err := controller.Start(ctx, parts.Apply(controller.Options{
		Bundle:       bundle.Hash(),
		Logger:       logger,
		Truncation:   truncation,
		KernelMemory: memory,
	}))
	if err != nil {
		release()
		return nil, output.Truncation{}, nil, err
	}
	end := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_ = s.Close(cctx)
		release()
	}
	return s, truncation, end, nil
}

// runTruncation is the truncation of a run: off with --no-truncate, else the truncation
// setting's, else the default.
func runTruncation(f runFlags, s settings.Settings) output.Truncation {
	switch {
	case f.noTruncate:
		return output.Off()
	case s.Truncation != nil:
		return s.Truncation.Output()
	}
	return output.Default()
}

// newLogger logs to w in text at level (a logLevel setting; "" is "warn"), or everything
// with debug (--debug).
func newLogger(w io.Writer, debug bool, level string) *slog.Logger {
	l := slog.LevelWarn
	switch {
	case debug || level == "debug":
		l = slog.LevelDebug
	case level == "info":
		l = slog.LevelInfo
	case level == "error":
		l = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// runCells runs cells one after another in a fresh local session.
func runCells(ctx context.Context, f runFlags, cells []string, stdout, stderr io.Writer) error {
	s, _, end, err := startSession(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer end()
	stopOnHardSignal(ctx, s)
	sink := controller.WriterSink{Stdout: stdout, Stderr: stderr}
	for _, code := range cells {
		res, err := s.Execute(ctx, code, sink)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx, "interrupted")
			}
			return err
		}
		switch res.Status {
		case "ok":
			if res.Result != nil {
				fmt.Fprintln(stdout, *res.Result)
			}
		case "interrupted":
			fmt.Fprintln(stderr, "KeyboardInterrupt")
			return interrupted(ctx, "")
		default:
			if res.Error != nil {
				fmt.Fprint(stderr, strings.TrimRight(res.Error.Traceback, "\n")+"\n")
			}
			return &exitError{code: 1}
		}
		if ctx.Err() != nil {
			return interrupted(ctx, "interrupted")
		}
	}
	return nil
}

// stopOnHardSignal kills s at once when a second signal comes (see withSignals), so a
// cell whose kernel ignores its interrupt or does not read does not keep kennel waiting
// for the interrupt grace.
func stopOnHardSignal(ctx context.Context, s *controller.Session) {
	hard := hardStop(ctx)
	if hard == nil {
		return
	}
	go func() {
		select {
		case <-hard:
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = s.Kill(kctx, context.Cause(ctx))
		case <-s.Done():
		}
	}()
}

// runShell runs f.sh as a job in a fresh local session: it prints the job's output as it
// arrives within the job's window (output.Follower), then the truncation
// notice, and exits with the job's code. Past --budget the job detaches: kennel says so
// and keeps waiting. Ctrl-C kills the job.
func runShell(ctx context.Context, f runFlags, stdout, stderr io.Writer) error {
	s, truncation, end, err := startSession(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer end()
	stopOnHardSignal(ctx, s)
	job, err := s.RunJob(ctx, f.sh, controller.JobOptions{})
	if err != nil {
		return err
	}
	follow := output.NewFollower(job.Capture(), truncation, stdout)

	const tick = 50 * time.Millisecond // how often the output so far is printed
	started := time.Now()
	detached := f.budget <= 0
	var settled jobs.Settled
	for {
		w, err := s.WaitJob(ctx, job.ID(), tick)
		if err != nil {
			return err
		}
		if err := follow.Poll(); err != nil {
			return err
		}
		if st, ok := w.Outcome.(jobs.Settled); ok {
			settled = st
			if w.Err != nil {
				fmt.Fprintf(stderr, "kennel: job %s: %v\n", job.ID(), w.Err)
			}
			break
		}
		if ctx.Err() != nil {
			return killShell(ctx, s, job, follow, stderr)
		}
		if !detached && time.Since(started) >= f.budget {
			detached = true
			fmt.Fprintf(stderr, "kennel: job %s still running after %v: detached; waiting for its end (Ctrl-C kills it)\n", job.ID(), f.budget)
		}
	}
	if err := follow.Finish(settled.Output); err != nil {
		return err
	}
	printNotice(ctx, s, settled, stderr)
	return jobExit(settled.End)
}

// killShell kills the job after Ctrl-C, waits for its end a while and prints what it kept.
func killShell(sigCtx context.Context, s *controller.Session, job *jobs.Job, follow *output.Follower, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.KillJob(ctx, job.ID()); err != nil {
		fmt.Fprintf(stderr, "kennel: kill job %s: %v\n", job.ID(), err)
	}
	if w, err := s.WaitJob(ctx, job.ID(), 10*time.Second); err == nil {
		if st, ok := w.Outcome.(jobs.Settled); ok {
			_ = follow.Poll()
			_ = follow.Finish(st.Output)
			printNotice(ctx, s, st, stderr)
		}
	}
	return interrupted(sigCtx, "interrupted: job "+job.ID().String()+" killed")
}

// printNotice prints the truncation notice of a settled job, naming the file its full
// output was saved to, or why it was not kept whole.
func printNotice(ctx context.Context, s *controller.Session, st jobs.Settled, stderr io.Writer) {
	r := st.Output
	if !r.Truncated() {
		return
	}
	r.Where = ""
	if path, err := s.SaveOutput(context.WithoutCancel(ctx), st.ID); err == nil {
		r.Where = path
	} else {
		// Past the spill limit the output was not retained whole: the notice names the
		// ranges that were (they go with the session's spill files at its end).
		r.ArtifactErr = fmt.Errorf("not saved: %w", err)
	}
	fmt.Fprintln(stderr, r.Notice())
}

// jobExit turns a job's end into kennel's exit: its code, 128+N for signal N, 1 when
// the end is unknown.
func jobExit(end jobs.End) error {
	switch {
	case end.ExitCode != nil && *end.ExitCode == 0:
		return nil
	case end.ExitCode != nil:
		return &exitError{code: *end.ExitCode}
	case end.Signal != 0:
		return &exitError{code: 128 + end.Signal}
	}
	return &exitError{code: 1, msg: "the job's end is unknown"}
}

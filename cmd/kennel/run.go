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
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/spf13/cobra"
)

// runFlags are the flags of `kennel run`.
type runFlags struct {
	codes []string
	dir   string
	debug bool
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [-c CODE]... [FILE | -]",
		Short: "Run Python cells in a fresh local kernel",
		Long: `Run Python code as cells in a fresh kernel and stream its output.

Each -c is one cell; a FILE is one cell; "-" reads cells from stdin, separated by lines
that start with "# %%" (the percent format editors use). Cells share one namespace; the
value of a cell's last expression is printed. A failing cell prints its traceback and
kennel exits 1; Ctrl-C interrupts the running cell and kennel exits 130.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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

// runCells runs cells one after another in a fresh local session.
func runCells(ctx context.Context, f runFlags, cells []string, stdout, stderr io.Writer) error {
	dir := f.dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		dir = wd
	}
	level := slog.LevelWarn
	if f.debug {
		level = slog.LevelDebug
	}
	bundle, err := images.Stub()
	if err != nil {
		return err
	}
	s, err := controller.Start(ctx, controller.Options{
		Transport: local.New(local.Options{}),
		Dir:       dir,
		Bundle:    bundle.Hash(),
		Handler:   hostHandler(dir),
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	sink := controller.WriterSink{Stdout: stdout, Stderr: stderr}
	for _, code := range cells {
		res, err := s.Execute(ctx, code, sink)
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: 130, msg: "interrupted"}
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
			return &exitError{code: 130}
		default:
			if res.Error != nil {
				fmt.Fprint(stderr, strings.TrimRight(res.Error.Traceback, "\n")+"\n")
			}
			return &exitError{code: 1}
		}
		if ctx.Err() != nil {
			return &exitError{code: 130, msg: "interrupted"}
		}
	}
	return nil
}

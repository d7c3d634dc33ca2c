package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kennel-dev/kennel/workspaces"
)

// newWorkspaceCmd returns the `kennel workspace` command: isolated child workspaces
// without a daemon (for CI): `create DIR` copies DIR and prints the child's path,
// `handback CHILD` brings the child's changes back and prints the outcome.
func newWorkspaceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workspace",
		Short: "Make isolated copies of a directory for children and hand their changes back",
	}
	cmd.AddCommand(newWorkspaceCreateCmd(), newWorkspaceHandbackCmd(), newWorkspaceSweepCmd())
	return cmd
}

// sweepEnv is added to the environment of the detached `kennel workspace sweep` (tests:
// what makes the test binary run main).
var sweepEnv []string

// sweepDetached hands the trash directories (workspaces.Sweeper.Deferred) to a
// `kennel workspace sweep` of this binary that runs detached: in a session of its own,
// in /, with stdin, stdout and stderr on /dev/null, not waited for; so the caller (a
// shell, or a CI step reading this process's output) is not held by the removal. A
// sweep that cannot start is done here before it returns. A sweep that ends early
// (killed, a reboot) leaves its trash to the next create or handback, which removes it.
func sweepDetached(ctx context.Context, trash []string) error {
	if len(trash) == 0 {
		return nil
	}
	sweep := exec.Command("/proc/self/exe", append([]string{"workspace", "sweep", "--"}, trash...)...)
	sweep.Env = append(os.Environ(), sweepEnv...)
	sweep.Dir = "/"
	sweep.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sweep.Start(); err == nil {
		return sweep.Process.Release()
	}
	var errs []error
	for _, t := range trash {
		errs = append(errs, workspaces.RemoveTrash(ctx, t))
	}
	return errors.Join(errs...)
}

// newWorkspaceSweepCmd returns the hidden `kennel workspace sweep TRASH...` that
// sweepDetached runs: it removes each workspace's trash/ directory given (refusing any
// other path).
func newWorkspaceSweepCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "sweep TRASH...",
		Short:  "Remove the trash/ directories of finished hand-backs (run by create and handback)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, t := range args {
				errs = append(errs, workspaces.RemoveTrash(cmd.Context(), t))
			}
			return errors.Join(errs...)
		},
	}
}

// defaultStateDir is $XDG_STATE_HOME/kennel, else ~/.local/state/kennel, else "".
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "kennel")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "kennel")
	}
	return ""
}

func newWorkspaceCreateCmd() *cobra.Command {
	var state, id string
	cmd := &cobra.Command{
		Use:   "create DIR",
		Short: "Copy DIR's tracked and not-ignored files for a child; print the child's path",
		Long: `Copy DIR's tracked and untracked-not-ignored files (git ls-files in a git work tree,
else the files DIR's .gitignore files do not ignore) twice under
<state>/workspaces/<parent>/<id>/: the base and the child's working copy. Files are
cloned where the file system can (XFS, btrfs), else copied, with one warning; the base
of a small file whose bytes are cached is its SHA-256 instead of a second copy. A
directory of more than 100,000 files is refused: share it instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if state == "" {
				return fmt.Errorf("workspace create: no state directory: set --state, XDG_STATE_HOME or HOME")
			}
			bar := newProgressBar(cmd.ErrOrStderr())
			defer bar.done()
			// Trash that earlier hand-backs left goes to a detached sweep.
			sweeper := workspaces.Sweeper{Defer: true}
			res, err := workspaces.Create(cmd.Context(), args[0], workspaces.CreateOptions{
				State:    state,
				ID:       id,
				Logger:   slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
				Progress: bar.update,
				Sweeper:  &sweeper,
			})
			sweepDetached(cmd.Context(), sweeper.Deferred()) // its errors: the trash stays for the next sweep
			if err != nil {
				return err
			}
			bar.done()
			fmt.Fprintln(cmd.OutOrStdout(), res.Path())
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultStateDir(), "kennel's state directory")
	cmd.Flags().StringVar(&id, "id", "", "the workspace's id ([A-Za-z0-9._-], up to 64); default: random")
	return cmd
}

func newWorkspaceHandbackCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "handback CHILD",
		Short: "Bring a child's changes back into its parent directory; print the outcome",
		Long: `Bring the changes in CHILD (the path create printed, or its workspace directory)
back into the parent, path by path: a path only the child changed is taken, one both
changed differently is a conflict (the parent's content stays, the child's is saved
under the workspace's conflicts/). Stop whatever runs in CHILD first: without a daemon
nothing stops it for you. A second handback prints the recorded outcome. The command
exits as soon as the outcome is recorded and printed; the base and the copy are then
removed by a detached process of their own (if it is killed first, the next create or
handback removes them).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bar := newProgressBar(cmd.ErrOrStderr())
			defer bar.done()
			sweeper := workspaces.Sweeper{Defer: true}
			out, err := workspaces.HandBack(cmd.Context(), args[0], workspaces.HandBackOptions{Progress: bar.update, Sweeper: &sweeper})
			if err != nil {
				sweepDetached(cmd.Context(), sweeper.Deferred()) // its errors: the trash stays for the next sweep
				return err
			}
			bar.done()
			// The outcome first, then the removal of the base and the copy is handed to
			// a detached process: the command does not wait for it.
			perr := printOutcome(cmd.OutOrStdout(), out, asJSON)
			if err := sweepDetached(cmd.Context(), sweeper.Deferred()); err != nil && perr == nil {
				return fmt.Errorf("workspace handback: the outcome is recorded; removing the copy: %w", err)
			}
			return perr
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	return cmd
}

// outcomeJSON is the --json form of an outcome.
type outcomeJSON struct {
	*workspaces.Outcome
	Repeat bool `json:"repeat"`
}

// printOutcome writes the outcome as text (a summary line, then one line a path) or JSON.
func printOutcome(w io.Writer, out *workspaces.Outcome, asJSON bool) error {
	if asJSON {
		return printJSON(w, outcomeJSON{Outcome: out, Repeat: out.Repeat})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "handed back to %s: %d taken, %d removed, %d conflicts, %d unchanged", out.Parent,
		len(out.Taken), len(out.Removed), len(out.Conflicts), out.Unchanged)
	if out.Repeat {
		b.WriteString(" (recorded earlier)")
	}
	b.WriteString("\n")
	for _, p := range out.Taken {
		fmt.Fprintf(&b, "taken    %s\n", p)
	}
	for _, p := range out.Removed {
		fmt.Fprintf(&b, "removed  %s\n", p)
	}
	for _, c := range out.Conflicts {
		fmt.Fprintf(&b, "conflict %s (%s)", c.Path, c.Reason)
		if c.Saved != "" {
			fmt.Fprintf(&b, ": the child's version is at %s", c.Saved)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// progressBar draws a one-line bar on a terminal once an operation has run for a second.
// On anything that is not a terminal it draws nothing.
type progressBar struct {
	w     io.Writer
	tty   bool
	start time.Time
	mu    sync.Mutex
	drawn bool
	ended bool
}

// barDelay is how long an operation runs before its bar shows.
const barDelay = time.Second

func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(*os.File)
	return &progressBar{w: w, tty: ok && term.IsTerminal(int(f.Fd())), start: time.Now()}
}

// update draws p; it is called from another goroutine.
func (b *progressBar) update(p workspaces.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tty || b.ended || time.Since(b.start) < barDelay {
		return
	}
	const width = 30
	line := fmt.Sprintf("%-6s %d", p.Phase, p.Done)
	if p.Total > 0 {
		filled := min(width, width*p.Done/p.Total)
		line = fmt.Sprintf("%-6s [%s%s] %d/%d", p.Phase, strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.Done, p.Total)
	}
	fmt.Fprintf(b.w, "\r\x1b[K%s", line)
	b.drawn = true
}

// done clears the bar's line; later updates draw nothing.
func (b *progressBar) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn && !b.ended {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
	b.ended = true
}

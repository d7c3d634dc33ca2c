package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/spf13/cobra"
)

// clientFlags are the flags every client verb takes.
type clientFlags struct {
	socket string
	json   bool
}

func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.socket, "socket", "", "the daemon's socket (default: as kennel serve)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the API's JSON reply")
}

// clientCmd makes cmd a client verb: it takes the client flags, and run is given a
// client of the daemon's socket, closed once run returns.
func clientCmd(cmd *cobra.Command, run func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error) *cobra.Command {
	var f clientFlags
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c := client.New(cmp.Or(f.socket, daemon.DefaultSocket(os.Getenv)))
		defer c.Close()
		return run(cmd, args, &f, c)
	}
	f.add(cmd)
	return cmd
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printList prints a list verb's reply: with --json the API's list object v, else a table
// of header and the lines rows writes (tab-separated cells).
func (f *clientFlags) printList(w io.Writer, v any, header string, rows func(tw io.Writer)) error {
	if f.json {
		return printJSON(w, v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	return tw.Flush()
}

// splitJobRef splits "SESSION/JOB".
func splitJobRef(ref string) (string, string, error) {
	s, j, ok := strings.Cut(ref, "/")
	if !ok || s == "" || j == "" {
		return "", "", &exitError{code: 2, msg: fmt.Sprintf("%q: name a job as SESSION/JOB (e.g. 3f2a9c1b04de/j2)", ref)}
	}
	return s, j, nil
}

func newPsCmd() *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:   "ps [--json]",
		Short: "List the daemon's sessions",
		Args:  cobra.NoArgs,
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		l, err := c.Sessions(cmd.Context())
		if err != nil {
			return err
		}
		return f.printList(cmd.OutOrStdout(), api.SessionList{Sessions: l}, "SESSION\tSTATE\tTRANSPORT\tJOBS\tCREATED\tCWD", func(tw io.Writer) {
			for _, s := range l {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, strOr(s.Kernel.State), strOr(s.Kernel.Transport),
					intOr(s.Kernel.LiveJobCount), time.UnixMilli(s.CreatedAt).Format(time.DateTime), s.Cwd)
			}
		})
	})
}

func strOr(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

func intOr(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func newCreateCmd() *cobra.Command {
	var tf transportFlags
	var dir, key string
	cmd := clientCmd(&cobra.Command{
		Use:   "create [-C DIR] [--local | --transport-argv ARGV | --docker [...] | --ssh HOST] [--idempotency-key KEY] [--json]",
		Short: "Create a session in a working directory and print its id",
		Args:  cobra.NoArgs,
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		req := api.CreateSession{}
		remoteDir := dir
		if tf.ssh == "" {
			abs, err := filepath.Abs(dir) // "": the current directory
			if err != nil {
				return err
			}
			req.Cwd = abs
		}
		// Without a flag the daemon reads the kernelTransport setting of the project at
		// cwd itself; a flag names the transport here, over that setting, as kennel run.
		if tf.given() {
			spec, _, err := tf.resolve(req.Cwd, remoteDir)
			if err != nil {
				return err
			}
			req.Transport = spec
		}
		s, err := c.CreateSession(cmd.Context(), req, client.CreateOptions{IdempotencyKey: key})
		if err != nil {
			return err
		}
		if f.json {
			return printJSON(cmd.OutOrStdout(), s)
		}
		fmt.Fprintln(cmd.OutOrStdout(), s.ID)
		return nil
	})
	cmd.Flags().StringVarP(&dir, "dir", "C", "", "the session's working directory (default: the current directory)")
	addTransportFlags(cmd.Flags(), &tf)
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a retried create with the same key returns the same session")
	return cmd
}

func newExecCmd() *cobra.Command {
	var codes []string
	var budget time.Duration
	cmd := clientCmd(&cobra.Command{
		Use:   "exec SESSION -c CODE [-c CODE]... [--budget D] [--json]",
		Short: "Run cells in a session, streaming their output",
		Long: `Run each -c as one cell in the session and stream its output. A cell's final value is
printed; a failing cell prints its traceback and kennel exits 1. A cell still running after
--budget is backgrounded: kennel prints its job (SESSION/JOB, for kennel logs and kennel stop) and
exits 3. With --json each cell's reply is printed as JSON instead.`,
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		if len(codes) == 0 {
			return &exitError{code: 2, msg: "nothing to run: give -c CODE"}
		}
		out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
		req := api.RunCell{}
		if cmd.Flags().Changed("budget") {
			b := budget.Milliseconds()
			req.BudgetMS = &b
		}
		for _, code := range codes {
			req.Code = code
			var rep *api.CellReply
			var err error
			if f.json {
				rep, err = c.RunCell(cmd.Context(), args[0], req)
			} else {
				rep, err = c.StreamCell(cmd.Context(), args[0], req, func(ev api.Event) {
					switch ev.Type {
					case "stream":
						if ev.Name == "stderr" {
							io.WriteString(errOut, ev.Text)
						} else {
							io.WriteString(out, ev.Text)
						}
					case "display":
						fmt.Fprintln(out, string(ev.Data))
					case "dropped":
						fmt.Fprintf(errOut, "kennel: %d bytes of output not streamed (kennel logs reads them)\n", ev.Bytes)
					}
				})
			}
			if err != nil {
				return err
			}
			if rep.Lost != nil && !f.json {
				fmt.Fprintf(errOut, "kennel: %s\n", *rep.Lost)
			}
			if u := rep.Upgrade; u != nil && !f.json {
				fmt.Fprintf(errOut, "kennel: the session's kernel (build %.12s) was replaced by one of the daemon's build (%.12s) before this cell; carried over: %s; left behind: %s\n",
					u.From, u.To, strings.Join(u.Carried, ", "), strings.Join(u.Left, ", "))
			}
			if f.json {
				if err := printJSON(out, rep); err != nil {
					return err
				}
			}
			if err := cellExit(rep, args[0], out, errOut, !f.json); err != nil {
				return err
			}
		}
		return nil
	})
	cmd.Flags().StringArrayVarP(&codes, "code", "c", nil, "a cell of Python code (repeatable)")
	cmd.Flags().DurationVar(&budget, "budget", 0, "background a cell still running after this long (default 60s): it runs on, kennel prints its job and exits 3")
	return cmd
}

// cellExit prints a cell's end (when human) and turns it into kennel's exit.
func cellExit(rep *api.CellReply, session string, out, errOut io.Writer, human bool) error {
	switch {
	case rep.State == "backgrounded":
		if human {
			fmt.Fprintf(errOut, "kennel: cell backgrounded: job %s/%s\n", session, rep.Job)
		}
		return &exitError{code: 3}
	case rep.Cell == nil:
		msg := "the cell ended without its result"
		if rep.Error != nil {
			msg = rep.Error.Message
		}
		return &exitError{code: 1, msg: msg}
	case rep.Cell.Status == "ok":
		if human && rep.Cell.Result != nil {
			fmt.Fprintln(out, *rep.Cell.Result)
		}
		return nil
	case rep.Cell.Status == "interrupted":
		if human {
			fmt.Fprintln(errOut, "KeyboardInterrupt")
		}
		return &exitError{code: 130}
	}
	if human && rep.Cell.Exception != nil {
		fmt.Fprint(errOut, strings.TrimRight(rep.Cell.Exception.Traceback, "\n")+"\n")
	}
	return &exitError{code: 1}
}

func newJobsCmd() *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:   "jobs SESSION [--json]",
		Short: "List a session's jobs",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		l, err := c.Jobs(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return f.printList(cmd.OutOrStdout(), api.JobList{Jobs: l}, "JOB\tSTATE\tPID\tSTARTED\tEND\tCOMMAND", func(tw io.Writer) {
			for _, j := range l {
				end := "-"
				if j.End != nil {
					end = j.End.Text
				}
				cmdText := strings.ReplaceAll(j.Command, "\n", " ")
				if r := []rune(cmdText); len(r) > 60 {
					cmdText = string(r[:59]) + "…"
				}
				fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", args[0], j.ID, j.State, intOr(j.PID),
					time.UnixMilli(j.StartedAt).Format(time.TimeOnly), end, cmdText)
			}
		})
	})
}

func newLogsCmd() *cobra.Command {
	var follow bool
	cmd := clientCmd(&cobra.Command{
		Use:   "logs SESSION/JOB [--follow] [--json]",
		Short: "Print a job's retained output, page by page",
		Long: `Print a job's output as it was retained, read in 64 KiB pages. Output that was not
retained (past the spill limit) ends the read with an error naming what is readable.
--follow keeps reading until the job ends. With --json each page is printed as JSON.`,
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		sid, job, err := splitJobRef(args[0])
		if err != nil {
			return err
		}
		var off int64
		for {
			p, err := c.Output(cmd.Context(), sid, job, off, 64<<10)
			if err != nil {
				return err
			}
			if f.json {
				if err := printJSON(cmd.OutOrStdout(), p); err != nil {
					return err
				}
			} else if _, err := cmd.OutOrStdout().Write(p.Data); err != nil {
				return err
			}
			off += int64(len(p.Data))
			switch {
			case p.EOF:
				return nil
			case p.More && !follow:
				return nil
			case p.More:
				select {
				case <-cmd.Context().Done():
					return &exitError{code: 130}
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep reading until the job ends")
	return cmd
}

func newStopCmd() *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:   "stop SESSION/JOB [--json]",
		Short: "Stop a job and wait (up to 15 s) for its end",
		Long: `Stop a job once and wait up to 15 s for its end. When the end is not confirmed the
outcome is unknown: kennel exits 1 and does not retry; read the job (kennel jobs) before
stopping it again.`,
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		sid, job, err := splitJobRef(args[0])
		if err != nil {
			return err
		}
		j, err := c.StopJob(cmd.Context(), sid, job)
		if err != nil {
			return err
		}
		if f.json {
			return printJSON(cmd.OutOrStdout(), j)
		}
		end := "ended"
		if j.End != nil {
			end = j.End.Text
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: %s\n", sid, j.ID, end)
		return nil
	})
}

func newRmCmd() *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:   "rm SESSION... [--json]",
		Short: "End sessions and their kernels",
		Args:  cobra.MinimumNArgs(1),
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		type result struct {
			ID      string     `json:"id"`
			Removed bool       `json:"removed"`
			Error   *api.Error `json:"error,omitempty"`
		}
		var results []result
		failed := false
		for _, id := range args {
			err := c.DeleteSession(cmd.Context(), id)
			r := result{ID: id, Removed: err == nil}
			if err != nil {
				failed = true
				if !errors.As(err, &r.Error) {
					r.Error = &api.Error{Code: api.CodeInternal, Message: err.Error()}
				}
				if !f.json {
					fmt.Fprintf(cmd.ErrOrStderr(), "kennel: rm %s: %v\n", id, err)
				}
			} else if !f.json {
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			results = append(results, r)
		}
		if f.json {
			if err := printJSON(cmd.OutOrStdout(), results); err != nil {
				return err
			}
		}
		if failed {
			return &exitError{code: 1}
		}
		return nil
	})
}

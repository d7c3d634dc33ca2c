package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kennel-dev/kennel/settings"
	"github.com/spf13/cobra"
)

// newConfigCmd builds `kennel config get|set|unset|path`.
func newConfigCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Read and change kennel's settings",
		Long: `Read and change settings.json: the global one (in $KENNEL_CONFIG_DIR, else
$XDG_CONFIG_HOME/kennel, else ~/.config/kennel) and a project's (.kennel/settings.json).

KEY is a setting's name or a dotted path into one (kernelTransport.python). VALUE is
JSON when it parses as JSON, else a string: 'set logLevel debug'.

get and path read the project at --project (default: the current directory); get prints
the value in effect and, on stderr, where it comes from and every problem of the files.
set and unset change the global file, or the project's with --project. A project's
kernelTransport and limits apply only when the global trustedProjects names it.`,
	}
	cmd.PersistentFlags().StringVar(&project, "project", "", "the project's root directory")
	cmd.AddCommand(
		&cobra.Command{
			Use:   "get KEY",
			Short: "Print the value of a setting in effect",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return configGet(projectOrCwd(project), args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
			},
		},
		&cobra.Command{
			Use:   "set KEY VALUE",
			Short: "Set a setting in the global file (or the project's, with --project)",
			Args:  cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				d, err := configDoc(project)
				if err != nil {
					return err
				}
				return configErr(d.Set(cmd.Context(), args[0], settings.ParseValue(args[1])))
			},
		},
		&cobra.Command{
			Use:   "unset KEY",
			Short: "Remove a setting from the global file (or the project's, with --project)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				d, err := configDoc(project)
				if err != nil {
					return err
				}
				return configErr(d.Unset(cmd.Context(), args[0]))
			},
		},
		&cobra.Command{
			Use:   "path",
			Short: "Print the settings files and whether they exist",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				return configPath(projectOrCwd(project), cmd.OutOrStdout())
			},
		},
	)
	return cmd
}

func projectOrCwd(project string) string {
	if project != "" {
		return project
	}
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	return wd
}

func configDoc(project string) (settings.Doc, error) {
	if project != "" {
		return settings.ProjectDoc(project)
	}
	return settings.GlobalDoc()
}

// configErr makes a refused change exit 2 (bad input), other failures 1.
func configErr(err error) error {
	if err == nil {
		return nil
	}
	for _, class := range []error{settings.ErrUndeclared, settings.ErrBadValue, settings.ErrScope} {
		if errors.Is(err, class) {
			return &exitError{code: 2, msg: err.Error()}
		}
	}
	return err
}

func configGet(project, key string, stdout, stderr io.Writer) error {
	path := strings.Split(key, ".")
	k, ok := settings.LookupKey(path[0])
	if !ok {
		return &exitError{code: 2, msg: fmt.Sprintf("get %s: %v", key, settings.ErrUndeclared)}
	}
	r, err := settings.Load(settings.LoadOptions{ProjectDir: project})
	if err != nil {
		return err
	}
	for _, p := range r.Problems {
		fmt.Fprintln(stderr, "kennel: warning:", p)
	}
	var value any = json.RawMessage(k.Default)
	if v, ok := r.Value(k.ID); ok {
		value = v
		fmt.Fprintln(stderr, "kennel: from", r.From[k.ID])
	} else {
		fmt.Fprintln(stderr, "kennel: not set: the default")
	}
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	for _, p := range path[1:] {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil || m[p] == nil {
			b = []byte("null")
			break
		}
		b = m[p]
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		out.Write(b)
	}
	fmt.Fprintln(stdout, out.String())
	return nil
}

func configPath(project string, stdout io.Writer) error {
	g, err := settings.GlobalFile()
	if err != nil {
		return err
	}
	p, err := settings.ProjectFile(project)
	if err != nil {
		return err
	}
	r, err := settings.Load(settings.LoadOptions{ProjectDir: project})
	if err != nil {
		return err
	}
	trust := "untrusted"
	if r.Trusted {
		trust = "trusted"
	}
	fmt.Fprintf(stdout, "global\t%s\t%s\n", g, existence(g))
	fmt.Fprintf(stdout, "project\t%s\t%s, %s\n", p, existence(p), trust)
	return nil
}

func existence(path string) string {
	if _, err := os.Lstat(path); err == nil {
		return "exists"
	}
	return "missing"
}

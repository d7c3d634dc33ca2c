package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/spf13/cobra"
)

func newFunctionsCmd() *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:   "functions SESSION [--json]",
		Short: "List the @remote functions a session's kernel registered",
		Long: `List the @remote functions a session's kernel registered (kennel.remote in a cell),
with their keyword arguments (from the JSON schema of their type hints) and the first
line of their docstring. A session whose kernel does not run lists none; no kernel is
started for it. A program calls one with POST /sessions/{id}/functions/{name}.`,
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, f *clientFlags, c *client.Client) error {
		l, err := c.Functions(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return f.printList(cmd.OutOrStdout(), api.FunctionList{Functions: l}, "NAME\tARGUMENTS\tMODULE\tDOC", func(tw io.Writer) {
			for _, fn := range l {
				name := fn.Name
				if fn.Async {
					name = "async " + name
				}
				doc, _, _ := strings.Cut(fn.Doc, "\n")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, signature(fn.Schema), fn.Module, doc)
			}
		})
	})
}

// signature renders a function's argument schema as "(a: integer, b?: integer)": each
// property in the schema's order with its type, "?" marking one that is not required,
// "**" when more are taken.
func signature(schema json.RawMessage) string {
	var s struct {
		Properties           json.RawMessage `json:"properties"`
		Required             []string        `json:"required"`
		AdditionalProperties json.RawMessage `json:"additionalProperties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return "(?)"
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	var parts []string
	dec := json.NewDecoder(strings.NewReader(string(s.Properties)))
	if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
		for dec.More() {
			tok, err := dec.Token()
			name, ok := tok.(string)
			if err != nil || !ok {
				break
			}
			var p struct {
				Type any `json:"type"`
			}
			if dec.Decode(&p) != nil {
				break
			}
			part := name
			if !required[name] {
				part += "?"
			}
			if t, ok := p.Type.(string); ok {
				part += ": " + t
			}
			parts = append(parts, part)
		}
	}
	if a := strings.TrimSpace(string(s.AdditionalProperties)); a != "" && a != "false" {
		parts = append(parts, "**")
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

package kernelimage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoMirror reports that apt's configuration names no Debian mirror for the suite.
var ErrNoMirror = errors.New("no debian mirror configured for the suite")

// Source is one apt source: the URIs it fetches from, its suites and its components.
type Source struct {
	// Types are the source's kinds ("deb", "deb-src").
	Types []string
	// URIs are the mirror base addresses, as written.
	URIs []string
	// Suites are the distribution names ("bookworm", "bookworm-updates").
	Suites []string
	// Components are the archive areas ("main", "contrib").
	Components []string
}

// ParseSources reads one apt sources file: the one-line format when name ends in
// ".list", the deb822 format when it ends in ".sources" (as apt reads them). Lines or
// stanzas it cannot use (comments, options it does not know, Enabled: no) are skipped;
// it never fails, since apt's configuration is the operator's and only the mirror is
// wanted from it.
func ParseSources(name string, data []byte) []Source {
	switch {
	case strings.HasSuffix(name, ".sources"):
		return parseDeb822(data)
	case strings.HasSuffix(name, ".list"):
		return parseOneLine(data)
	}
	return nil
}

func parseOneLine(data []byte) []Source {
	var out []Source
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		typ := f[0]
		rest := f[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Options: "[arch=amd64 signed-by=...]", possibly over several fields.
			j := 0
			for j < len(rest) && !strings.HasSuffix(rest[j], "]") {
				j++
			}
			if j >= len(rest) {
				continue
			}
			rest = rest[j+1:]
		}
		if len(rest) < 2 {
			continue
		}
		out = append(out, Source{Types: []string{typ}, URIs: []string{rest[0]}, Suites: []string{rest[1]}, Components: rest[2:]})
	}
	return out
}

func parseDeb822(data []byte) []Source {
	var out []Source
	fields := map[string]string{}
	var last string
	flush := func() {
		if len(fields) > 0 && !strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no") {
			s := Source{
				Types:      strings.Fields(fields["types"]),
				URIs:       strings.Fields(fields["uris"]),
				Suites:     strings.Fields(fields["suites"]),
				Components: strings.Fields(fields["components"]),
			}
			if len(s.Types) > 0 && len(s.URIs) > 0 && len(s.Suites) > 0 {
				out = append(out, s)
			}
		}
		fields = map[string]string{}
		last = ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			last = ""
			continue
		}
		last = strings.ToLower(strings.TrimSpace(k))
		fields[last] = strings.TrimSpace(v)
	}
	flush()
	return out
}

// PickMirror returns the first "deb" URI, over sources in order, whose suites include
// suite and whose components include main, with any trailing slash removed. It returns
// ErrNoMirror when there is none.
func PickMirror(sources []Source, suite string) (string, error) {
	for _, s := range sources {
		if !slices.Contains(s.Types, "deb") || !slices.Contains(s.Suites, suite) || !slices.Contains(s.Components, "main") {
			continue
		}
		for _, u := range s.URIs {
			if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "file:/") {
				return strings.TrimRight(u, "/"), nil
			}
		}
	}
	return "", fmt.Errorf("suite %q: %w", suite, ErrNoMirror)
}

// AptMirror reads the apt configuration under root ("/" for this machine):
// etc/apt/sources.list, then etc/apt/sources.list.d/*.list and *.sources in name order,
// and returns the Debian mirror for suite (see PickMirror). Files that cannot be read
// are skipped; no mirror at all is ErrNoMirror, naming the files read.
func AptMirror(root, suite string) (string, error) {
	files := []string{filepath.Join(root, "etc/apt/sources.list")}
	d := filepath.Join(root, "etc/apt/sources.list.d")
	if ents, err := os.ReadDir(d); err == nil {
		for _, e := range ents { // in name order
			if n := e.Name(); strings.HasSuffix(n, ".list") || strings.HasSuffix(n, ".sources") {
				files = append(files, filepath.Join(d, n))
			}
		}
	}
	var all []Source
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		all = append(all, ParseSources(f, data)...)
	}
	m, err := PickMirror(all, suite)
	if err != nil {
		return "", fmt.Errorf("apt mirror in %s: %w", filepath.Join(root, "etc/apt"), err)
	}
	return m, nil
}

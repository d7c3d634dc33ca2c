package settings

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
)

// docModel builds a document leaf by leaf and records, for each leaf, whether it must
// apply (in want) or be named (in bad).
type docModel struct {
	members []string // top-level "key": value texts
	want    Settings
	bad     []string // pointers that must be named, each once
}

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

func (m *docModel) add(key, value string) { m.members = append(m.members, q(key)+":"+value) }

func (m *docModel) text() string { return "{" + strings.Join(m.members, ",") + "}" }

func drawLogLevel(t *rapid.T, m *docModel) {
	if rapid.Bool().Draw(t, "logLevel good") {
		v := rapid.SampledFrom(logLevels).Draw(t, "level")
		m.add("logLevel", q(v))
		m.want.LogLevel = v
		return
	}
	m.add("logLevel", rapid.SampledFrom([]string{`3`, `"loud"`, `null`, `["debug"]`}).Draw(t, "bad level"))
	m.bad = append(m.bad, "/logLevel")
}

func drawTrusted(t *rapid.T, m *docModel) {
	if !rapid.Bool().Draw(t, "trusted array") {
		m.add("trustedProjects", `"/p"`)
		m.bad = append(m.bad, "/trustedProjects")
		return
	}
	n := rapid.IntRange(0, 4).Draw(t, "n trusted")
	var elems []string
	m.want.TrustedProjects = []string{}
	for i := range n {
		if rapid.Bool().Draw(t, "trusted good") {
			p := "/p/" + strconv.Itoa(i)
			elems = append(elems, q(p))
			m.want.TrustedProjects = append(m.want.TrustedProjects, p)
		} else {
			elems = append(elems, rapid.SampledFrom([]string{`"rel"`, `1`, `null`, `""`}).Draw(t, "bad trusted"))
			m.bad = append(m.bad, "/trustedProjects/"+strconv.Itoa(i))
		}
	}
	m.add("trustedProjects", "["+strings.Join(elems, ",")+"]")
}

func drawTruncation(t *rapid.T, m *docModel) {
	switch rapid.IntRange(0, 2).Draw(t, "truncation form") {
	case 0:
		m.add("truncation", `"off"`)
		m.want.Truncation = &Truncation{Off: true}
	case 1:
		m.add("truncation", rapid.SampledFrom([]string{`"on"`, `5`, `[]`}).Draw(t, "bad truncation"))
		m.bad = append(m.bad, "/truncation")
	default:
		tr := &Truncation{}
		var fields []string
		for _, f := range []string{"bytes", "lines", "keep", "extra"} {
			if !rapid.Bool().Draw(t, f+" present") {
				continue
			}
			good := f != "extra" && rapid.Bool().Draw(t, f+" good")
			switch {
			case good && f == "keep":
				v := rapid.SampledFrom([]string{"head", "tail"}).Draw(t, "keep")
				fields = append(fields, q(f)+":"+q(v))
				tr.Keep = v
			case good:
				v := rapid.Int64Range(1, 1<<40).Draw(t, f)
				fields = append(fields, q(f)+":"+strconv.FormatInt(v, 10))
				if f == "bytes" {
					tr.Bytes = v
				} else {
					tr.Lines = v
				}
			default:
				fields = append(fields, q(f)+":"+rapid.SampledFrom([]string{`-1`, `0`, `1.5`, `"x"`, `"middle"`}).Draw(t, "bad "+f))
				m.bad = append(m.bad, "/truncation/"+f)
			}
		}
		m.add("truncation", "{"+strings.Join(fields, ",")+"}")
		m.want.Truncation = tr
	}
}

// drawKernelTransport draws a unit leaf by leaf. The unit is one: every bad leaf is
// named, and a unit with any applies nothing (an empty, unusable unit).
func drawKernelTransport(t *rapid.T, m *docModel) {
	if !rapid.Bool().Draw(t, "unit an object") {
		m.add("kernelTransport", `["docker"]`)
		m.bad = append(m.bad, "/kernelTransport")
		m.want.KernelTransport = &KernelTransport{}
		return
	}
	kt := &KernelTransport{}
	var fields, bad []string
	kinds := 0
	if rapid.Bool().Draw(t, "argv present") {
		kinds++
		n := rapid.IntRange(1, 4).Draw(t, "argv n")
		badAt := rapid.IntRange(-1, n-1).Draw(t, "argv bad at")
		var elems []string
		var argv []string
		for i := range n {
			if i == badAt {
				elems = append(elems, `7`)
			} else {
				elems = append(elems, q("w"+strconv.Itoa(i)))
				argv = append(argv, "w"+strconv.Itoa(i))
			}
		}
		fields = append(fields, `"argvPrefix":[`+strings.Join(elems, ",")+"]")
		if badAt >= 0 {
			bad = append(bad, "/kernelTransport/argvPrefix/"+strconv.Itoa(badAt))
		}
		kt.ArgvPrefix = argv
	}
	if rapid.Bool().Draw(t, "second kind") {
		kinds++
		fields = append(fields, `"docker":{}`)
		kt.Docker = &sessionspec.Docker{}
	}
	if kinds != 1 {
		bad = append(bad, "/kernelTransport") // names no transport, or two
	}
	if rapid.Bool().Draw(t, "env present") {
		n := rapid.IntRange(0, 4).Draw(t, "env n")
		var elems []string
		kt.Env = []string{}
		for i := range n {
			if rapid.Bool().Draw(t, "env good") {
				elems = append(elems, q("V"+strconv.Itoa(i)))
				kt.Env = append(kt.Env, "V"+strconv.Itoa(i))
			} else {
				elems = append(elems, rapid.SampledFrom([]string{`"1X"`, `"A-B"`, `2`, `""`}).Draw(t, "bad env"))
				bad = append(bad, "/kernelTransport/env/"+strconv.Itoa(i))
			}
		}
		fields = append(fields, `"env":[`+strings.Join(elems, ",")+"]")
	}
	if rapid.Bool().Draw(t, "pathMap present") {
		n := rapid.IntRange(0, 3).Draw(t, "mounts n")
		var elems []string
		kt.PathMap = []pathmap.Mount{}
		for i := range n {
			mnt := pathmap.Mount{Sandbox: "/s" + strconv.Itoa(i), Host: "/h" + strconv.Itoa(i), ReadOnly: rapid.Bool().Draw(t, "ro")}
			text := `"sandbox":` + q(mnt.Sandbox) + `,"host":` + q(mnt.Host) + `,"readOnly":` + strconv.FormatBool(mnt.ReadOnly)
			switch rapid.IntRange(0, 3).Draw(t, "mount kind") {
			case 0, 1:
				kt.PathMap = append(kt.PathMap, mnt)
			case 2:
				text += `,"readonly":true`
				bad = append(bad, "/kernelTransport/pathMap/"+strconv.Itoa(i)+"/readonly")
			case 3:
				text = `"sandbox":"relative","host":` + q(mnt.Host)
				bad = append(bad, "/kernelTransport/pathMap/"+strconv.Itoa(i)+"/sandbox")
			}
			elems = append(elems, "{"+text+"}")
		}
		fields = append(fields, `"pathMap":[`+strings.Join(elems, ",")+"]")
	}
	if rapid.Bool().Draw(t, "unknown field") {
		fields = append(fields, `"colour":"blue"`)
		bad = append(bad, "/kernelTransport/colour")
	}
	m.add("kernelTransport", "{"+strings.Join(fields, ",")+"}")
	m.bad = append(m.bad, bad...)
	if len(bad) > 0 {
		kt = &KernelTransport{}
	}
	m.want.KernelTransport = kt
}

func drawPool(t *rapid.T, m *docModel) {
	if !rapid.Bool().Draw(t, "pool object") {
		m.add("pool", rapid.SampledFrom([]string{`2`, `"docker"`, `null`, `[1]`}).Draw(t, "bad pool"))
		m.bad = append(m.bad, "/pool")
		return
	}
	var fields []string
	m.want.Pool = Pool{}
	for _, k := range append(slices.Clone(PoolKinds), "colour") {
		if !rapid.Bool().Draw(t, k+" present") {
			continue
		}
		if k != "colour" && rapid.Bool().Draw(t, "size good") {
			n := rapid.IntRange(0, MaxPool).Draw(t, "size")
			fields = append(fields, q(k)+":"+strconv.Itoa(n))
			m.want.Pool[k] = n
			continue
		}
		fields = append(fields, q(k)+":"+rapid.SampledFrom([]string{`-1`, `65`, `1.5`, `"2"`, `null`}).Draw(t, "bad size"))
		m.bad = append(m.bad, "/pool/"+k)
	}
	m.add("pool", "{"+strings.Join(fields, ",")+"}")
}

// Each leaf of a generated document applies or is named, and never both: the
// settings read are exactly the good leaves, the problems exactly the bad ones.
func TestEachLeafAppliesOrIsNamed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &docModel{}
		for _, draw := range []func(*rapid.T, *docModel){drawLogLevel, drawTrusted, drawTruncation, drawKernelTransport, drawPool} {
			if rapid.Bool().Draw(t, "key present") {
				draw(t, m)
			}
		}
		for i := range rapid.IntRange(0, 2).Draw(t, "unknown keys") {
			k := "unknown" + strconv.Itoa(i)
			m.add(k, `{"x": 1}`)
			m.bad = append(m.bad, "/"+k)
		}
		root, err := parseDocument([]byte(m.text()))
		if err != nil {
			t.Fatalf("%s: %v", m.text(), err)
		}
		got, problems := decodeDocument("f", root)
		var named []string
		for _, p := range problems {
			named = append(named, p.Pointer)
		}
		slices.Sort(named)
		slices.Sort(m.bad)
		if !slices.Equal(named, m.bad) {
			t.Fatalf("document %s\nnamed %q\nwant  %q", m.text(), named, m.bad)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(m.want)
		if string(gj) != string(wj) {
			t.Fatalf("document %s\nread %s\nwant %s", m.text(), gj, wj)
		}
	})
}

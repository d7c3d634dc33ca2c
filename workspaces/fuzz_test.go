package workspaces

import (
	"bytes"
	"crypto/sha256"
	"io/fs"
	"maps"
	"strings"
	"testing"
)

// fuzzPaths are the paths FuzzPlan's trees are made of: a, b, c up to three deep.
func fuzzPaths() []string {
	var out []string
	names := []string{"a", "b", "c"}
	var add func(prefix string, depth int)
	add = func(prefix string, depth int) {
		for _, n := range names {
			p := prefix + n
			out = append(out, p)
			if depth < 3 {
				add(p+"/", depth+1)
			}
		}
	}
	add("", 1)
	return out
}

// fuzzTrees decodes data into base, parent and child: three bytes an operation (which
// tree, which path, what entry); the parent and the child start as the base.
func fuzzTrees(data []byte) (base, parent, child Listing) {
	paths := fuzzPaths()
	base = Listing{}
	var parentOps, childOps [][3]byte
	for i := 0; i+2 < len(data); i += 3 {
		op := [3]byte{data[i], data[i+1], data[i+2]}
		switch op[0] % 3 {
		case 0:
			fuzzApply(base, paths, op)
		case 1:
			parentOps = append(parentOps, op)
		case 2:
			childOps = append(childOps, op)
		}
	}
	parent, child = maps.Clone(base), maps.Clone(base)
	for _, op := range parentOps {
		fuzzApply(parent, paths, op)
	}
	for _, op := range childOps {
		fuzzApply(child, paths, op)
	}
	return base, parent, child
}

func fuzzApply(l Listing, paths []string, op [3]byte) {
	p := paths[int(op[1])%len(paths)]
	v := op[2]
	switch v % 8 {
	case 0:
		for q := range l {
			if q == p || under(q, p) {
				delete(l, q)
			}
		}
	case 1:
		put(l, p, Entry{Kind: KindDir})
	case 2:
		put(l, p, Entry{Kind: KindSymlink, Content: string(rune('x' + v%3))})
	case 3:
		put(l, p, Entry{Kind: KindOther, Content: "other"})
	default:
		mode := fs.FileMode(0o644)
		if v&0x40 != 0 {
			mode = 0o755
		}
		put(l, p, Entry{Kind: KindFile, Mode: mode, Content: string(rune('0' + v>>3%4))})
	}
}

// FuzzPlan states Plan's laws (checkPlan, checkCut) on trees decoded from any bytes.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 4, 2, 0, 12, 1, 0, 0})
	f.Add([]byte{0, 1, 4, 0, 4, 5, 1, 1, 1, 2, 0, 0, 2, 4, 4})
	f.Add([]byte{0, 3, 4, 1, 0, 0, 2, 1, 4, 2, 0, 4, 1, 3, 13})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			return
		}
		base, parent, child := fuzzTrees(data)
		for _, l := range []Listing{base, parent, child} {
			if err := valid(l); err != nil {
				t.Fatalf("decoder made a bad tree: %v", err)
			}
		}
		// The base a workspace copies has no special files.
		for p, e := range base {
			if e.Kind == KindOther {
				delete(base, p)
			}
		}
		checkPlan(t, base, parent, child)
		checkCut(t, base, parent, child)
	})
}

// FuzzManifest checks the manifest decoder never panics on any input, and that what it
// accepts encodes back to the same bytes.
func FuzzManifest(f *testing.F) {
	f.Add(encodeManifest(1, 2, nil))
	f.Add(encodeManifest(5, 9, []mentry{
		{Path: "a/b c\td\n", Kind: KindFile, Mode: 0o755, Size: 3, Parent: fingerprint{1, 2, 3, 4, 5, 6}, Child: fingerprint{7, 8, 9, 10, 11, 12}},
		{Path: "l\xff", Kind: KindSymlink, Size: 4, Target: "../x"},
		{Path: "d", Kind: KindFile, Mode: 0o644, Size: 5, HasDigest: true, Digest: sha256.Sum256([]byte("hello"))},
	}))
	f.Add([]byte("kennel-workspace-manifest 1 0 0\n1 420 0 0 0 0 0 0 0 0 0 0 0 0 0 \"../x\" \"\"\n"))
	f.Add([]byte("kennel-workspace-manifest 1 0 0\n1 420 1 0 0 0 0 0 0 0 0 0 0 0 0 \"a\" \"\"\n"))
	f.Add([]byte("kennel-workspace-manifest 2 0 0\n2 0 1 0 0 0 0 0 0 0 0 0 0 0 0 " + strings.Repeat("ab", 32) + " \"l\" \"t\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeManifest(data)
		if err != nil {
			return
		}
		for _, e := range m.entries {
			if safeRel(e.Path) != nil {
				t.Fatalf("accepted an unsafe path %q", e.Path)
			}
		}
		again := encodeManifest(m.Start, m.End, m.entries)
		m2, err := decodeManifest(again)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		if !bytes.Equal(encodeManifest(m2.Start, m2.End, m2.entries), again) {
			t.Fatalf("manifest does not round-trip")
		}
	})
}

// FuzzIDs checks ValidID never accepts a slash, a dot-dot or a leading dot, and ParentKey
// always gives a safe single path element.
func FuzzIDs(f *testing.F) {
	for _, s := range []string{"a", "..", "a/b", ".x", "/", "x y", "é", "project"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidID(s) == nil {
			if strings.ContainsAny(s, "/\x00") || s == "." || s == ".." || strings.HasPrefix(s, ".") || len(s) > maxIDLen {
				t.Fatalf("ValidID accepted %q", s)
			}
		}
		k := ParentKey("/" + s)
		if k == "" || strings.ContainsAny(k, "/\x00") || strings.HasPrefix(k, ".") || ValidID(k) != nil && !strings.HasPrefix(k, "_") {
			t.Fatalf("ParentKey(%q) = %q", s, k)
		}
	})
}

// TestManifestVersions checks the decoder on both versions: a version 1 line (no digest
// column) reads with no digest; a version 2 digest reads back; a digest on a symlink, an
// upper-case or short digest, and a version 1 line under a version 2 header are refused.
func TestManifestVersions(t *testing.T) {
	nums := "1 420 5 0 0 0 0 0 0 0 0 0 0 0 0 "
	hexd := "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")
	m, err := decodeManifest([]byte("kennel-workspace-manifest 1 0 0\n" + nums + `"a" ""` + "\n"))
	if err != nil || m.get("a") == nil || m.get("a").HasDigest {
		t.Fatalf("version 1: %+v, %v", m, err)
	}
	m, err = decodeManifest([]byte("kennel-workspace-manifest 2 0 0\n" + nums + hexd + ` "a" ""` + "\n"))
	if err != nil || !m.get("a").HasDigest || m.get("a").Digest != sha256.Sum256([]byte("hello")) {
		t.Fatalf("version 2: %+v, %v", m, err)
	}
	for name, line := range map[string]string{
		"symlink digest": "2 0 1 0 0 0 0 0 0 0 0 0 0 0 0 " + hexd + ` "l" "t"`,
		"upper case":     nums + strings.ToUpper(hexd) + ` "a" ""`,
		"short":          nums + hexd[:62] + ` "a" ""`,
		"no column":      nums + `"a" ""`,
	} {
		if _, err := decodeManifest([]byte("kennel-workspace-manifest 2 0 0\n" + line + "\n")); err == nil {
			t.Errorf("%s: accepted %q", name, line)
		}
	}
}

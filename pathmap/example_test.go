package pathmap_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kennel-dev/kennel/pathmap"
)

func Example() {
	project, _ := os.MkdirTemp("", "project")
	defer os.RemoveAll(project)
	os.WriteFile(filepath.Join(project, "main.py"), []byte("print(1)\n"), 0o644)
	os.Symlink("/etc", filepath.Join(project, "etc"))

	m, err := pathmap.New(pathmap.Config{
		Dir:    project,
		Mounts: []pathmap.Mount{{Sandbox: "/work", Host: project}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	fmt.Println("kernel starts in", m.Dir())

	t, err := m.Resolve("/work", "./main.py")
	fmt.Println(t.Sandbox(), err)

	_, err = m.Resolve("/work", "etc/passwd")
	var fe *pathmap.FsError
	if errors.As(err, &fe) {
		fmt.Println(fe.Code(), fe.Version, errors.Is(err, pathmap.ErrOutside))
	}
	// Output:
	// kernel starts in /work
	// /work/main.py <nil>
	// outside transport@1 true
}

// A Docker kernel runs as a uid:gid of its own; the files fs.write creates for it are
// given to the same owner, so they look like the ones the kernel writes itself.
func ExampleParseOwner() {
	o, err := pathmap.ParseOwner("10001:10001") // the transport's user, numeric
	fmt.Println(o, err)
	_, err = pathmap.ParseOwner("kernel") // a name would need the image's /etc/passwd
	fmt.Println(errors.Is(err, pathmap.ErrInvalid))
	// Then: pathmap.New(pathmap.Config{Dir: dir, Mounts: mounts, Owner: &o}); New fails
	// with pathmap.ErrDenied when kennel may not chown (not root, no CAP_CHOWN).
	// Output:
	// 10001:10001 <nil>
	// true
}

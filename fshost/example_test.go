package fshost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/pathmap"
)

func Example() {
	project, _ := os.MkdirTemp("", "project")
	defer os.RemoveAll(project)
	m, err := pathmap.New(pathmap.Config{Dir: project, Mounts: []pathmap.Mount{{Sandbox: "/work", Host: project}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	srv := fshost.New(m, fshost.Options{})
	ctx := context.Background()

	srv.Serve(ctx, "fs.write", json.RawMessage(`{"path": "notes/a.txt", "content": "one\ntwo\n"}`))
	res, _ := srv.Serve(ctx, "fs.read", json.RawMessage(`{"path": "/work/notes/a.txt", "offset": 1}`))
	out, _ := json.Marshal(res)
	fmt.Println(string(out))

	_, err = srv.Serve(ctx, "fs.read", json.RawMessage(`{"path": "/etc/passwd"}`))
	fmt.Printf("%+v\n", fshost.Describe(err))
	// Output:
	// {"absolute":"/work/notes/a.txt","content":"two\n","offset":1,"lines":1,"total_lines":2,"truncated":false}
	// {Code:outside Message:map "/etc/passwd": outside every mount Reason:outside Version:transport@1}
}

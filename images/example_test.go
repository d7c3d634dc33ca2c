package images_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kennel-dev/kennel/images"
)

// Unpack the embedded stub into a private cache and build the argv of a kernel.
func Example() {
	b, err := images.Stub()
	if err != nil {
		fmt.Println(err)
		return
	}
	cache, err := os.MkdirTemp("", "kennel-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(cache)
	dir, err := b.Unpack(cache)
	if err != nil {
		fmt.Println(err)
		return
	}
	argv := images.KernelArgv("/usr/bin/python3", dir)
	fmt.Println(argv[1:3], filepath.Base(dir) == b.Hash(), images.KernelEnv(b)[0] == images.EnvBundle+"="+b.Hash())
	// Output: [-I -S] true true
}

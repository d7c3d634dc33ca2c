package jobs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/kennel-dev/kennel/jobs"
)

func ExampleWait() {
	table, err := jobs.NewTable(jobs.TableOptions{})
	if err != nil {
		panic(err)
	}
	job, err := table.Start(jobs.Spec{
		Command: "make test",
		Owner:   jobs.OwnerFunc(func(context.Context) error { return nil }),
	})
	if err != nil {
		panic(err)
	}
	job.Output([]byte("ok\n"))

	// A passed deadline detaches at once.
	o := jobs.Wait(context.Background(), job, time.Time{})
	fmt.Printf("%T %s %q\n", o, o.Job(), o.SoFar().Kept)

	job.Finish(jobs.Exited(0))
	s := jobs.Wait(context.Background(), job, time.Now().Add(time.Second)).(jobs.Settled)
	fmt.Println(s.End)
	// Output:
	// jobs.Detached j1 "ok\n"
	// exit 0
}

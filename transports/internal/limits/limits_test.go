package limits

import (
	"context"
	"testing"
	"time"
)

func TestZeroIsTheDefaultAndNegativeIsNone(t *testing.T) {
	for _, c := range []struct{ v, def, want int64 }{{0, 7, 7}, {-1, 7, 0}, {3, 7, 3}} {
		if got := Of(c.v, c.def); got != c.want {
			t.Errorf("Of(%d, %d) = %d, want %d", c.v, c.def, got, c.want)
		}
	}
	ctx, cancel := Context(context.Background(), -1, time.Second)
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Error("a negative timeout set a deadline")
	}
	ctx, cancel = Context(context.Background(), 0, time.Hour)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Errorf("a zero timeout's deadline is %v (set %v), want the default's", d, ok)
	}
}

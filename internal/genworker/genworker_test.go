package genworker

import "testing"

func TestFinishedAnyway(t *testing.T) {
	stops := []int32{257}
	for _, c := range []struct {
		out    []int32
		maxNew int
		want   bool
	}{
		{nil, 10, false},               // aborted before prefill
		{[]int32{1, 2}, 10, false},     // a real partial
		{[]int32{1, 2, 257}, 10, true}, // the stop token came first
		{[]int32{1, 2, 3}, 3, true},    // the budget was spent
	} {
		if got := finishedAnyway(c.out, stops, c.maxNew); got != c.want {
			t.Errorf("finishedAnyway(%v, max %d) = %v, want %v", c.out, c.maxNew, got, c.want)
		}
	}
}

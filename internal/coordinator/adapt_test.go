package coordinator

import "testing"

func TestNextLimit(t *testing.T) {
	const floor, ceiling = 12, 36
	tests := []struct {
		name    string
		limit   int
		l       load
		binding bool
		want    int
	}{
		{"idle slots, samples waiting, no re-prefill: rise by the idle slots", 12, load{slots: 8, running: 5, generated: 1000}, true, 15},
		{"idle slots but nothing waiting: stay", 12, load{slots: 8, running: 5, generated: 1000}, false, 12},
		{"every slot busy: stay", 20, load{slots: 8, running: 8, generated: 1000}, true, 20},
		{"re-prefill above the bound: fall by a tenth", 30, load{slots: 8, running: 2, generated: 1000, reprefilled: 600}, true, 27},
		{"re-prefill between half the bound and the bound: stay", 20, load{slots: 8, running: 2, generated: 1000, reprefilled: 300}, true, 20},
		{"never below the floor", 12, load{slots: 8, running: 8, generated: 100, reprefilled: 1000}, true, floor},
		{"never above the ceiling", 35, load{slots: 64, running: 0, generated: 1000}, true, ceiling},
		{"no tokens generated: re-prefill cannot lower it", 20, load{slots: 8, running: 8, reprefilled: 50}, true, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextLimit(tt.limit, floor, ceiling, tt.l, tt.binding, 0.5); got != tt.want {
				t.Fatalf("nextLimit = %d, want %d", got, tt.want)
			}
		})
	}
	if delta(5, 100) != 5 || delta(150, 100) != 50 {
		t.Fatal("delta: a counter that went back counts whole")
	}
}

package virtual

import (
	"slices"

	"github.com/actloop/actloop/pkg/priority"
)

// Dispatch orders: how a gen-worker files its waiting gen steps and in
// which order it takes them.
const (
	// DispatchActloop is actloop's: one FIFO per class, taken in
	// priority.DispatchOrder (rhi > rlo > hi > lo), where a resumed class
	// holds generations interrupted by preemption or a weight sync and a
	// trajectory's first generation shares hi or lo with continuing turns.
	DispatchActloop = ""
	// DispatchReference is siiRL-agentic's: three FIFOs taken in the order
	// hp_resume > lp_resume > pending. A trajectory back from its
	// environment step goes to hp_resume or lp_resume by its class, a
	// trajectory's first generation to pending whatever its class, and an
	// interrupted generation (it has output kept) to the resume queue of
	// its class. A high step waiting is one in hp_resume.
	DispatchReference = "reference"
)

// queues is the number of FIFOs a gen-worker keeps under order.
func queues(order string) int {
	if order == DispatchReference {
		return 3
	}
	return len(priority.DispatchOrder)
}

// queueOf is the FIFO, by position in dispatch order, of a gen step of
// class (a priority class, priority.Resumed after an interruption); first
// is whether it is its trajectory's first generation and nothing of it has
// been generated yet.
func queueOf(order, class string, first bool) int {
	if order == DispatchReference {
		switch {
		case first:
			return 2
		case priority.IsHigh(class):
			return 0
		default:
			return 1
		}
	}
	return slices.Index(priority.DispatchOrder, class)
}

// queueHigh reports whether FIFO k under order holds high steps: the ones
// that may preempt a low generation.
func queueHigh(order string, k int) bool {
	if order == DispatchReference {
		return k == 0
	}
	return priority.IsHigh(priority.DispatchOrder[k])
}

package virtual

import (
	"slices"

	"github.com/actloop/actloop/pkg/priority"
)

// Dispatch orders: how a gen-worker files its waiting gen steps and in
// which order it takes them.
const (
	// DispatchActloop is actloop's: one FIFO per class, taken in
	// priority.DispatchOrder (rhi > rlo > hi > lo), each step filed by
	// priority.StepClass: a trajectory's first generation in hi or lo, every
	// later step of it (back from its environment step, or interrupted) in
	// rhi or rlo.
	DispatchActloop = ""
	// DispatchReference is siiRL-agentic's: three FIFOs taken in the order
	// hp_resume > lp_resume > pending. A trajectory back from its
	// environment step goes to hp_resume or lp_resume by its class, a
	// trajectory's first generation to pending whatever its class, and an
	// interrupted generation (it has output kept) to the resume queue of
	// its class. A high step waiting is one in hp_resume. It differs from
	// DispatchActloop only in keeping one pending FIFO for both classes.
	DispatchReference = "reference"
)

// queues is the number of FIFOs a gen-worker keeps under order.
func queues(order string) int {
	if order == DispatchReference {
		return 3
	}
	return len(priority.DispatchOrder)
}

// queueOf is the FIFO, by position in dispatch order, of a gen step of a
// trajectory whose priority class is class (ClassHigh or ClassLow); first
// is whether it is its trajectory's first generation, not interrupted, with
// nothing of it generated yet.
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
	return slices.Index(priority.DispatchOrder, priority.StepClass(class, first))
}

// queueHigh reports whether FIFO k under order holds high steps: the ones
// that may preempt a low generation.
func queueHigh(order string, k int) bool {
	if order == DispatchReference {
		return k == 0
	}
	return priority.IsHigh(priority.DispatchOrder[k])
}

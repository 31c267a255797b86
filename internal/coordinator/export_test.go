package coordinator

// NewTerm is newTerm, for the tests of package coordinator_test.
var NewTerm = newTerm

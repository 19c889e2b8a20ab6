package conformance_test

// historyVariants break the attempt history MarkFailed keeps and Lookup
// reports (see breakInfo and breakOperatorFailures).
var historyVariants = []variant{
	{"history-last-only", "Lookup reports only the last attempt in History (a backend that keeps the last error alone)", []string{"History/KeepsEveryAttemptInOrder", "History/KeepsOnlyTheLastTen", "History/RequeueKeepsHistory"}},
	{"history-newest-first", "Lookup reports History newest first", []string{"History/KeepsEveryAttemptInOrder", "History/KeepsOnlyTheLastTen"}},
	{"history-owner-missing", "MarkFailed records attempts without the lease's owner", []string{"History/KeepsEveryAttemptInOrder"}},
	{"history-uncapped", "MarkFailed keeps every attempt, not the last MaxAttemptHistory", []string{"History/KeepsOnlyTheLastTen"}},
	{"history-reset-with-attempts", "Requeue drops the history with the attempt count (Lookup reports none while Attempts is 0)", []string{"History/RequeueKeepsHistory"}},
}

// deferredVariants break Failure.Deferred (see breakOperatorFailures and
// afterFetchOperate).
var deferredVariants = []variant{
	{"deferred-counts-attempt", "MarkFailed treats a Deferred failure as an attempt: it counts it, stores its error and adds it to the history", []string{"Deferred/NotAnAttempt", "Deferred/LaterFailureCountsAnAttempt"}},
	{"deferred-holds-back-only-attempted", "a Deferred failure of an entry never attempted only schedules it Delay from now: it holds back nothing (a hold-back on Attempts > 0 alone)", []string{"Deferred/HoldsBackItsKeyOnly"}},
	{"deferred-blocks-partition", "while an entry is deferred, fetches of its partition return only deferred entries (the hold-back is not by key)", []string{"Deferred/HoldsBackItsKeyOnly"}},
	{"deferred-never-released", "a deferred entry keeps holding back its key after it is sent or parked", []string{"Deferred/SentOrParkedReleasesTheKey"}},
	{"deferred-park-accepted", "MarkFailed parks a failure that sets both Park and Deferred instead of refusing the call", []string{"Deferred/ParkWithDeferredRejected"}},
	{"deferred-park-checked-late", "MarkFailed writes the failures before one that sets both Park and Deferred, then refuses it", []string{"Deferred/ParkWithDeferredRejected"}},
}

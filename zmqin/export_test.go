package zmqin

// Test helpers exported to the external tests of this directory (package
// zmqin_test), which run the Ingress against zmqpub's Publisher: zmqpub
// imports zmqin, so they cannot be in package zmqin.

type IndexSink = indexSink

const TestBlockSize = testBlockSize

var (
	NewIndexSink      = newIndexSink
	Tokens            = tokens
	StoredBatch       = stored
	RemovedBatch      = removed
	WaitFor           = waitFor
	CheckNoLeak       = checkNoLeak
	DefaultTestConfig = testConfig
	NewTestIngress    = newIngress
	FreeEndpoint      = freeEndpoint
)

const RefusedEndpoint = refusedEndpoint

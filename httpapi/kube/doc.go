// Package kube is the Kubernetes discovery source of the worker catalog:
// client-go informers on the pods of one namespace and on one
// inference.networking.k8s.io/v1 InferencePool (read through the dynamic
// client, with no generated types), turned into complete memberships for
// core.CatalogReconciler. It is edge code feeding core's existing seam
// (core.CatalogSource); core never sees client-go.
//
// # What becomes a worker
//
// The target is the InferencePool's spec.selector.matchLabels and its
// first spec.targetPorts[].number (Config.PoolName), or a label selector
// and port from the flags (Config.Selector, Config.TargetPorts). A pod the
// target selects is a worker while its Ready condition is True, it is not
// terminating (no deletionTimestamp) and it has an IP. Its record:
//
//   - worker_id: WorkerID(metadata.uid), 53 bits of a SHA-256. The UID
//     never changes for a pod and is new for a pod recreated under the
//     same name, so a restarted pod is a new worker (its KV cache is
//     empty) and the old one's bookings are released;
//   - endpoint http://IP:port; kv_events_endpoints {r:
//     tcp://IP:(KVEventsPort + r·KVEventsPortStride)} for each of the
//     DataParallelSize ranks; replay_endpoint tcp://IP:ReplayPort when
//     set (one rank only);
//   - model_name, block_size, total_kv_blocks, max_num_batched_tokens from
//     the Config; routing_group from the pod label Config.RoleLabel if
//     set and present, else Config.RoutingGroup.
//
// # Two pools: disaggregated prefill and decode
//
// With Config.PrefillPoolName as well, the source watches two
// InferencePools, each through an informer of its own, over the one pod
// informer: PoolName is the decode pool, whose workers get the decode
// routing group, and PrefillPoolName the prefill pool, whose workers get
// the prefill group (core.DefaultDecodeRoutingGroup and
// core.DefaultPrefillRoutingGroup unless set), so that
// core.Service.PlanDisagg books the one pool's prefill and the other's
// decode. One complete membership covers both pools, so a pod relabelled
// from one pool to the other changes its group in one reconciler pass
// (same worker id, its bookings released as for any partition move). A
// pod both pools select is a decode worker only. Ready() needs both
// pools usable; a pool absent or unusable selects nothing while the
// other's workers stay.
//
// LoRA adapters are not discovery's: the engines scraper (httpapi/engines)
// reports them to core.Service.SetEngineAdapters.
//
// # The contract with the host
//
//  1. Build a Config (DefaultConfig, then RegisterFlags and
//     RegisterWorkerFlags on the host's flag set, with os.LookupEnv for the
//     environment defaults), and a core.CatalogReconciler on the Service
//     (Exclusive, so that the API's worker routes cannot fight the pods).
//  2. New(cfg, rec, log) reads the kubeconfig or the in-cluster config and
//     builds the informers; it opens no connection.
//  3. RegisterMetrics(reg) before serving, if the host has a registry.
//  4. Run(ctx) on a goroutine of its own: it starts the informers, waits
//     for their first lists, sends the first membership, then one per
//     change, coalesced over Config.Debounce (100 ms), and only when the
//     membership changed. It also runs rec.Run on the source. A pod that
//     goes unready, is deleted, leaves the selector or changes IP changes
//     the membership; the reconciler deletes a worker that left, which
//     releases its bookings, and re-registers one whose address changed.
//     Informers relist after a broken or expired watch, so the membership
//     converges after an API server restart. Until the first list the
//     catalog is untouched; a pool that is missing or unusable gives an
//     empty membership.
//  5. Ready() gates the host's readiness (synced, and the pool usable).
//  6. Cancel ctx to stop: Run returns after the informers and the
//     reconciler have stopped, and the catalog keeps its last state (a
//     shutdown, not a source failure). Then rec.Close.
//
// Goroutines: Run's own (the debounce loop), the reconciler's, and the
// informers' (client-go's reflectors and processors, two per informer).
//
// # Tests
//
// No kube-apiserver can run on the machines this project builds on (no
// package ships one and nothing may be downloaded), so the tests run the
// real client-go, configured through a generated kubeconfig file, against
// a protocol-level fake API server (fakeapi_test.go): the REST list and
// watch of pods and inferencepools with resource versions, chunked JSON
// watch events (ADDED, MODIFIED, DELETED, BOOKMARK and the streaming-list
// initial-events-end bookmark, ERROR 410 for an expired version), label
// and field selectors, a bearer token, and restarts that drop every watch.
// Its fidelity to kube-apiserver is limited to what informers use.
package kube

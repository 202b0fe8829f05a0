// Package sched is kvselect's scheduling decision: which (worker, dp_rank)
// gets a request, and the bookkeeping of the load already booked on each.
// The semantics are Dynamo's (ai-dynamo/dynamo:lib/kv-router/src/scheduling/
// for the cost function and picker, lib/kv-router/src/sequences/ for the
// load accounting), because callers compare our decisions with Dynamo's.
//
// Package sched opens no sockets, starts no goroutines, reads no clock and no
// environment: time and configuration are inputs. It keeps counters and the
// per-worker prompt trie, not requests: the host owns each live request and
// embeds its Slot.
//
// # The host's contract
//
// A host (core) keeps one WorkerLoad per schedulable (worker, dp_rank)
// (NewWorkerLoad; Retire when the rank leaves) and, per request:
//
//  1. Resolves the weights: p, err := cfg.Resolve(override), where cfg was
//     validated at start-up and override is the request's
//     router_config_override (nil when absent). An error is the caller's.
//  2. Builds the candidate rows: cands, err = AppendCandidates(cands[:0],
//     workers, &constraints). One row per eligible (worker, dp_rank); errors
//     are ErrNoEndpoints, ErrAllOverloaded, ErrPinnedNotAllowed and
//     ErrPinnedOverloaded.
//  3. Fills every row: the overlap fields (DeviceBlocks, HostBlocks,
//     DiskBlocks) from the index's tiered match, the worker's registered
//     capacity (TotalKVBlocks, MaxBatchedTokens) and the load fields with
//     WorkerLoad.Fill(&cands[i], seqHashes, p.AssumeKVReuse). A row without
//     a WorkerLoad keeps HasLoad false.
//  4. Scores and picks with the request's SelectionPolicy: cands, i, err
//     = pol.Choose(&SelectionContext{Params, Request, Rand}, cands, costs,
//     part). DefaultSelectionPolicy is the reference's Score then
//     Pick(costs, p.Temperature, rng), bit for bit; an embedder's policy
//     adds Filters, Scorers and a Picker of its own (selection.go,
//     ExampleSelectionPolicy), and kvselect's own is CacheBalancePolicy.
//     Choose is allocation-free when the components are; the
//     SelectionContext must not be a fresh value per request if that makes
//     it escape. ErrAllFiltered when the policy's
//     filters drop every row. With queueing on (a PolicyProfile whose
//     class has a busy line), a host asks PolicyClass.ShouldQueue before
//     this step and parks the request in a PolicyQueue until capacity
//     frees (admission.go).
//  5. Books (select_and_reserve, reservations): slot.Book(load,
//     &Booking{...}) on the Slot of the host's record of the request, with
//     PrefillTokens = EffectivePrefillTokens(isl, CachedTokens(&p, bs,
//     &cands[i])) when p.TrackPrefillTokens, else 0. A_p saturates at
//     MaxActivePrefillTokens (client-supplied token counts cannot wrap it).
//  6. Reports: effective_prefill_tokens as in step 5,
//     potential_decode_blocks = SelectedDecodeBlocks(&req, &cands[i],
//     len(seqHashes)), decode_busy = DecodeBusy(that, totalKVBlocks,
//     cfg.DecodeBusyThreshold), and for an advisory select prefill_busy =
//     PrefillBusy(A_p, capacity, cfg.PrefillBusyThreshold); an unknown
//     verdict omits the field.
//  7. Drives the lifecycle on the Slot: CompletePrefill, OutputBlock, and
//     Release once the request is freed, expired (cfg.ActiveRequestExpiry
//     after admission) or its worker retired. The host decides which call
//     wins (one record, one owner); Release is idempotent regardless.
//  8. Passes every device-tier BlockStored event of a rank's KV events to
//     its WorkerLoad.CreditStored, which credits the blocks to the booking
//     they compute (A_c, progress.go): the prefill left on the rank, which
//     CacheBalance reads and the reference's cost function does not. Only
//     bookings made with a BlockSize, whose sequence hashes are the public
//     tracking chain and kept (TrackActiveBlocks and AssumeKVReuse), can
//     be credited. A host without KV events skips this step; A_c then
//     stays 0.
//
// # Concurrency
//
// Selections are not serialized (Dynamo serializes them on one actor per
// partition). Scoring reads per-worker counters with atomic loads; a booking
// updates them with atomic adds right after the pick, so two concurrent
// selections can see the same stale load only for the few microseconds
// between Fill and Book (TestConcurrentBookingsSpread measures the result).
// Scoring takes no lock: WorkerLoad.NewBlocks walks the worker's prompt
// trie lock-free (writers publish changes by atomic pointer stores, see
// pnode), while Slot.Book, OutputBlock and Release serialize on the worker's
// mutex, as does CreditStored. CompletePrefill is atomic swaps.
//
// # Errors
//
// Every error wraps one sentinel of errors.go; the host classifies them.
package sched

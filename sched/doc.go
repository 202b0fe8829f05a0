// Package sched is kvselect's scheduling decision: which (worker, dp_rank)
// gets a request, and the bookkeeping of the load already booked on each.
// The semantics are Dynamo's (spec/scheduling-and-index.md sections 1 to 8),
// because callers compare our decisions with Dynamo's.
//
// Package sched opens no sockets, starts no goroutines, reads no clock and no
// environment: time and configuration are inputs.
//
// # The host's contract
//
// A host (core) owns one Tracker per partition and, per request:
//
//  1. Resolves the weights: p, err := cfg.Resolve(override), where cfg was
//     validated at start-up and override is the request's
//     router_config_override (nil when absent). An error is a 400.
//  2. Builds the candidate rows: cands, err = AppendCandidates(cands[:0],
//     workers, &constraints). One row per eligible (worker, dp_rank); errors
//     are the scheduler errors of spec 2.6 (ErrNoEndpoints,
//     ErrAllOverloaded, ErrPinnedNotAllowed, ErrPinnedOverloaded).
//  3. Fills every row: the overlap fields (DeviceBlocks, HostBlocks,
//     DiskBlocks) from the index's tiered match, and the load fields with
//     tracker.Worker(key) then WorkerLoad.Fill(&cands[i], seqHashes,
//     p.AssumeKVReuse). A worker the tracker does not know keeps HasLoad
//     false.
//  4. Scores and picks: Score(&p, &req, cands, costs) then i :=
//     Pick(costs, p.Temperature, rng). Both are allocation-free. Queueing
//     (router_queue_threshold, policy classes) will sit between steps 3
//     and 4 behind the Admission interface; today every request is admitted.
//  5. Books (select_and_reserve, reservations): tracker.Book(&Booking{...},
//     now) with PrefillTokens = EffectivePrefillTokens(isl,
//     CachedTokens(&p, bs, &cands[i])) when p.TrackPrefillTokens, else 0.
//     If the response cannot be delivered, Free the id again. A_p
//     saturates at MaxActivePrefillTokens (client-supplied token counts
//     cannot wrap it).
//  6. Reports: effective_prefill_tokens as in step 5,
//     potential_decode_blocks = SelectedDecodeBlocks(&req, &cands[i],
//     len(seqHashes)), decode_busy = DecodeBusy(that, totalKVBlocks,
//     cfg.DecodeBusyThreshold), and for an advisory select prefill_busy =
//     PrefillBusy(A_p, capacity, cfg.PrefillBusyThreshold); an unknown
//     verdict omits the field.
//  7. Forwards lifecycle calls: PrefillComplete(id), OutputBlock(id, f),
//     Free(id). Free and PrefillComplete are idempotent and report whether
//     the id was live; mapping "not live" to 404 is the host's choice. A
//     host that keeps its own index of bookings books with BookHandle,
//     stores the Handle in its row and forwards with PrefillCompleteHandle,
//     OutputBlockHandle and FreeHandle: those act only on that booking, so
//     a call that looked the row up before the id was freed and booked
//     again cannot act on the newer booking (the id-based calls would).
//  8. Calls Expire(now) periodically (Book also runs it lazily, at most
//     once per Config.ExpiryCheckInterval), and AddWorker/RemoveWorker as
//     the catalog changes. Booking never creates a worker.
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
// pnode), while Book, Free and OutputBlock serialize on the worker's mutex.
//
// # Errors
//
// Every error wraps one sentinel of errors.go; the host classifies them.
package sched

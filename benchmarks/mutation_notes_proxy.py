"""Why each surviving mutant of specd/proxy/ is harmless, or which test now kills it (read by
benchmarks/mutation_report.py --layer proxy). Keys: a mutant's name, a function's, or a `..._mutmut_` prefix."""

REQ = "test_proxy_requests::"  # the tests of what the proxy answers and records per request
NOTES: dict[str, str] = {
    "specd.proxy.warmup.x_warm_up__mutmut_8": ("the empty warm-up's counts: `Warmed.describe` reads only "
                                               "`sent`, which is falsy either way"),
    "specd.proxy.warmup.x_warm_up__mutmut_9": ("the empty warm-up's counts: `Warmed.describe` reads only "
                                               "`sent`, which is falsy either way"),
    "specd.proxy.warmup.x_warm_up__mutmut_10": ("the empty warm-up's counts: `Warmed.describe` reads only "
                                               "`sent`, which is falsy either way"),
    "specd.proxy.warmup.x_warm_up__mutmut_15": ("the empty warm-up's counts: `Warmed.describe` reads only "
                                               "`sent`, which is falsy either way"),
    "specd.proxy.warmup.x_warm_up__mutmut_16": ("the empty warm-up's counts: `Warmed.describe` reads only "
                                               "`sent`, which is falsy either way"),
    "specd.proxy.relay.xǁRelayǁstop": "a second stop closes the upstream again; `close` is idempotent",
    "specd.proxy.http1.client.xǁUpstreamPoolǁdiscard_idle": "defence only: the re-send after a drop on a reused "
                                                            "connection goes on a fresh one whatever the pool "
                                                            "holds; closing the other idle ones saves a later "
                                                            "request from meeting them",
    "specd.proxy.proxy.xǁProxyǁ_follow__mutmut_1": "the same as discard_idle's: the re-send goes fresh anyway",
    "specd.proxy.http1.client.x_answers_health_now": "the probe's timeout (1 s, 2 s or the default): how long a "
                                                     "drop's judgement may take, not what it decides",
    "specd.proxy.http1.client.xǁBackendConnectionǁdetach": "the connection is closed on the next line; nothing "
                                                           "reads `response` on a closed connection",
    "specd.proxy.http1.client.xǁBackendConnectionǁpause_reading": "a guard against a transport already closed: "
                                                                  "uvloop's pause on a closing transport is a "
                                                                  "no-op",
    "specd.proxy.http1.client.xǁBackendConnectionǁresume_reading": "the same guard, for resume",
    "specd.proxy.http1.listener.xǁFrontServerǁ_warn": "how often the cap's warning is logged (at most once a "
                                                      "minute): the journal's volume, not behaviour",
    "specd.proxy.http1.listener.xǁFrontServerǁ_evict_idle__mutmut_2": "`id(c)` only breaks ties between "
                                                                       "connections idle since the same instant",
    "specd.proxy.gate.xǁBackendGateǁpause__mutmut_2": "`_paused_until` is only compared with None (is a pause "
                                                      "on); the lease's end is its timer's",
    "specd.proxy.http1.response.xǁUpstreamFailedǁ__init__": "the exception's text and the cause's name go into "
                                                            "the error message only; `reused` is always passed",
    "specd.proxy.resend.x_decide__mutmut_1": "a default every caller overrides (the proxy passes each argument)",
    "specd.proxy.resend.x_decide__mutmut_3": "a default every caller overrides",
    "specd.proxy.resend.xǁResendsǁafter__mutmut_1": "a default every caller overrides",
    "specd.proxy.resend.xǁResendsǁafter__mutmut_2": "a default every caller overrides",
    "specd.proxy.relay.x_read_whole": "the body of a 503 that broke off while loading, shown only if the hold "
                                      "then expires: a placeholder either way",
    "specd.proxy.relay.xǁClientWatchǁ_left": "a client that left is recorded 499 before this flag is read; "
                                             "with it unset the cancellation propagates and the server closes "
                                             "the connection it already lost",
    "specd.proxy.proxy.xǁProxyǁshutdown": "the last wait after the streams were cut: they end at once, so it "
                                          "returns before 5 s, 6 s or forever would matter",
    "specd.proxy.http1.server.xǁFrontConnectionǁ_close_lingering__mutmut_2": "an `or` of guards that are each "
                                                                              "enough: the same closes",
    "specd.proxy.http1.server.xǁFrontConnectionǁ_close_lingering__mutmut_3": "the same",
    "specd.proxy.http1.server.xǁFrontConnectionǁ_close_lingering__mutmut_7": ("how long a refused client may "
                                                                               "go on sending (5 s): a test would "
                                                                               "need a client slower than the "
                                                                               "sweep; not covered"),
    "specd.proxy.http1.server.xǁFrontConnectionǁ_close_lingering__mutmut_8": "the same: the linger's length",
    "specd.proxy.http1.server.xǁFrontConnectionǁpause_writing": ("the flag matters only when an answer starts "
                                                                  "while the socket is still backed up from the "
                                                                  "one before (pipelining behind a slow reader); "
                                                                  "not covered"),
    "specd.proxy.http1.response.xǁUpstreamResponseǁpause_reading": ("a slow client's stream must not be cut by "
                                                                     "the idle timeout while the backend is paused "
                                                                     "for it: a test needs more than the socket "
                                                                     "buffers in flight and a client slower than "
                                                                     "the timeout; not covered"),
    "specd.proxy.http1.response.xǁUpstreamResponseǁresume_reading": "the same, on resume",
    "specd.proxy.http1.response.xǁUpstreamResponseǁ_check_stall__mutmut_5": "`<` or `<=` at the exact instant "
                                                                            "of the timeout",
    "specd.proxy.http1.server.xǁFrontConnectionǁ_answer_refusal__mutmut_10": "`head_only` None is falsy",
    "specd.proxy.http1.server.xǁFrontConnectionǁ_answer_refusal__mutmut_11": "an error answer is whole; "
                                                                              "`chunked_ok` is never read",
    "specd.proxy.http1.server.xǁFrontConnectionǁ_answer_refusal__mutmut_16": "the same",
    "specd.proxy.http1.responder.xǁResponderǁclient_left": ("the callback is cleared when the answer ends, so "
                                                            "`not ended` adds nothing once it is None"),
    "specd.proxy.bodies.xǁBodyReaderǁ_executor": ("which pool reads a big body off the loop (its own one-thread "
                                                 "pool, the loop's default pool, a two-thread one, a thread's "
                                                 "name): the same document either way; the own pool only keeps a "
                                                 "burst of big bodies off the default pool's threads"),
    "specd.proxy.bodies.xǁBodyReaderǁread__mutmut_1": "the same: the loop's default pool instead of the own one",
    "specd.proxy.bodies.xǁBodyReaderǁdocument__mutmut_1": "the same: the loop's default pool instead of the own one",
    "specd.proxy.http1.listener.xǁFrontServerǁ_evict_idle__mutmut_6": ("the (idle-since, connection) pairs sort by "
                                                                       "their first element with or without the "
                                                                       "key; only an exact tie differs"),
    "specd.proxy.http1.listener.xǁFrontServerǁ_evict_idle__mutmut_9": "the same: the key's default",
    "specd.proxy.crashes.xǁCrashǁdescribe__mutmut_5": ("the journal line's wording when no profile is known "
                                                      "(`profile )` instead of nothing): a person's text"),
    "specd.proxy.relay.xǁRelayǁon_error__mutmut_6": ("the note stored beside a 499 (the client left): None is "
                                                    "stored as no note; the status, which is what is counted, "
                                                    "is asserted"),
    "specd.proxy.relay.xǁRelayǁon_error__mutmut_8": "the same note, left out",
    "specd.proxy.http1.server.xǁFrontConnectionǁ_read_on": ("not covered: reading on while an earlier answer "
                                                            "is still being written (a pipelined body behind a "
                                                            "busy request) buffers that body sooner; a test needs "
                                                            "a pipelined body larger than the socket buffers"),
    "specd.proxy.routes.xǁRouterǁ__init__": ("how often a companion marked down is asked for /health (0.5 s): "
                                            "how soon it is used again, not whether"),
    "specd.proxy.routes.xǁRouterǁpick__mutmut_6": "`split(b\"?\")` without its limit: the same first part",
    "specd.proxy.routes.xǁRouterǁmark_down__mutmut_3": ("a second /health poller for a companion already polled: "
                                                       "both end when it answers; the same outcome"),
    "specd.proxy.routes.xǁRouterǁmark_down__mutmut_4": "the same: a second poller",
    "specd.proxy.routes.xǁRouterǁwait_idle__mutmut_11": "`>` or `>=` at the exact instant of the deadline",
    "specd.proxy.routes.xǁRouterǁwait_idle__mutmut_14": ("how often `route off` looks at the in-flight count "
                                                        "(every 20 ms or 1 s): how soon the companion stops"),
    "specd.proxy.heap.xǁTrimmerǁ_trim__mutmut_2": ("the count after a trim starts at 1 byte instead of 0: the "
                                                  "next trim one byte sooner"),
    "specd.proxy.heap.x_give_back_free_memory": ("not covered by a unit test: what malloc_trim gives back is "
                                                 "measured as the daemon's RSS after big bodies "
                                                 "(benchmarks/results/hostile-bodies.md); its return value is "
                                                 "not read"),
    "specd.proxy.heap.x_keep_big_blocks_apart": ("not covered by a unit test (one call at the daemon's start): "
                                                 "its effect is the RSS and CPU measured in "
                                                 "benchmarks/results/hostile-bodies.md"),
    "specd.proxy.exchange.xǁExchangeǁscan__mutmut_3": ("equivalent: a comment line or `data: [DONE]` let through "
                                                     "carries no token and no usage, so nothing more is noted"),
    "specd.proxy.gate.xǁBackendGateǁ_poll__mutmut_1": ("killed now: test_gate::test_a_closed_gate_stops_polling_a_"
                                                      "backend_that_stays_down"),
    "specd.proxy.gate.xǁBackendGateǁresume__mutmut_1": ("killed now: test_gate::test_resume_without_a_new_pause_"
                                                       "leaves_no_lease_to_close_the_gate_again"),
    'specd.proxy.attempts.xǁAttemptsǁ_pick__mutmut_5': (
        'killed now: '
        'test_attempts::test_a_conversation_that_began_on_the_primary_stays_there_when_its_next_turn_is_of_a_routed_class'),
    'specd.proxy.attempts.xǁAttemptsǁcompanion_failed__mutmut_': (
        'killed now: '
        'test_attempts::test_a_failed_companion_attempt_moves_to_the_primary_and_a_failed_primary_attempt_does_not'),
    'specd.proxy.routes.xǁRouterǁpick__mutmut_54': (
        'killed now: '
        'test_attempts::test_a_conversation_that_began_on_the_primary_stays_there_when_its_next_turn_is_of_a_routed_class'),
    'specd.proxy.routes.xǁRouterǁpick__mutmut_7': (
        'killed now: '
        'test_router::test_a_target_whose_query_holds_another_question_mark_is_routed_by_its_path'),
    'specd.proxy.routes.xǁRouterǁpick__mutmut_9': (
        '`split(b"?", 2)`: the same first part'),
    'specd.proxy.routes.xǁRouterǁpick__mutmut_90': (
        'killed now: '
        'test_router::test_a_busy_routed_companion_sends_the_next_request_to_the_idle_primary_at_the_sets_busy_at'),
    'specd.proxy.routes.xǁRouterǁpick__mutmut_95': (
        'killed now: '
        'test_router::test_a_busy_routed_companion_sends_the_next_request_to_the_idle_primary_at_the_sets_busy_at'),
    'specd.proxy.routes.xǁRouterǁrefresh__mutmut_6': (
        'killed now: '
        'test_router::test_a_refresh_keeps_the_conversations_on_companions_that_stay_and_forgets_those_that_left'),
    'specd.proxy.routes.xǁRouterǁrefresh__mutmut_7': (
        'killed now: '
        'test_router::test_a_refresh_keeps_the_conversations_on_companions_that_stay_and_forgets_those_that_left'),
    'specd.proxy.routes.xǁRouterǁstatus__mutmut_26': (
        'killed now: '
        'test_router::test_status_shows_an_idle_companion_with_nothing_in_flight_and_the_per_request_mode'),
    'specd.proxy.routes.xǁRouterǁstatus__mutmut_27': (
        'killed now: '
        'test_router::test_status_shows_an_idle_companion_with_nothing_in_flight_and_the_per_request_mode'),
    'specd.proxy.routes.xǁRouterǁstatus__mutmut_6': (
        'killed now: '
        'test_router::test_status_shows_an_idle_companion_with_nothing_in_flight_and_the_per_request_mode'),
    'specd.proxy.routes.xǁRouterǁ_poll__mutmut_4': (
        'equivalent: `refresh` drops a companion that left the set from `down` in the '
        'same step that changes the set, so the poller leaves its loop before it can see '
        'the companion gone'),
    'specd.proxy.routes.xǁRouterǁwait_idle__mutmut_9': (
        'equivalent: `end` deletes a count that reaches 0, so a missing count is None or '
        '0, falsy either way'),
    'specd.proxy.gate.xǁBackendGateǁpass_through__mutmut_': (
        'killed now: '
        'test_gate::test_the_hold_histogram_records_no_wait_through_an_open_gate_and_the_wait_through_a_paused_one'),
    'specd.proxy.gate.xǁBackendGateǁwait__mutmut_4': (
        '`<` or `<=` at the exact instant of the deadline: a zero wait times out and the '
        'next look raises'),
    'specd.proxy.heap.xǁTrimmerǁ__init____mutmut_3': (
        'killed now: test_body_shape::test_a_fresh_trimmer_waits_for_the_whole_threshold'),
    'specd.proxy.bodies.xǁBodyReaderǁinline__mutmut_1': (
        'killed now: '
        'test_body_shape::test_the_loop_reads_bodies_up_to_its_bound_the_thread_up_to_the_reading_bound_and_nothing_past_it'),
    'specd.proxy.bodies.xǁBodyReaderǁread_now__mutmut_': (
        'killed now: '
        'test_body_shape::test_the_loop_reads_bodies_up_to_its_bound_the_thread_up_to_the_reading_bound_and_nothing_past_it'),
    'specd.proxy.bodies.xǁBodyReaderǁclose__mutmut_': (
        "the reader's pool at the daemon's exit: parses still queued belong to requests "
        'cut by the shutdown (cancelled or not, nobody reads them), and waiting for a '
        'running one is bounded by the 8 MiB reading bound'),
    "specd.proxy.exchange.xǁExchangeǁto_record__mutmut_": (
        "killed now: test_exchange::test_the_traffic_row_of_a_whole_answer_carries_its_shape_usage_and_timings, "
        "test_exchange::test_a_streams_output_length_comes_from_usage_else_timings_else_its_token_events"),
    "specd.proxy.exchange.xǁExchangeǁscan__mutmut_9": ("equivalent: a `data: [DONE]` let through carries no token "
                                                      "and no usage, so nothing more is noted"),
    "specd.proxy.exchange.xǁExchangeǁscan__mutmut_10": "the same: `[DONE]` let through",
    "specd.proxy.exchange.xǁExchangeǁscan__mutmut_11": "the same: `[DONE]` let through",
    "specd.proxy.exchange.x_json_object__mutmut_4": ("equivalent: both callers hand the result to `absorb`, which "
                                                    "takes nothing but a dict"),
    "specd.proxy.warmup.x_warm_up__mutmut_19": (
        "killed now: test_warmup::test_a_warm_up_without_a_key_sends_none_and_a_request_that_errors_is_not_counted_"
        "answered"),
    "specd.proxy.warmup.x_warm_up__mutmut_47": "killed now: the same test (a refused request counted answered)",
    "specd.proxy.warmup.x_warm_up__mutmut_71": "killed now: the same test (the seconds as `now + started`)",
    "specd.proxy.warmup.x_warm_up__mutmut_25": ("equivalent: no client timeout; `asyncio.wait(..., budget_s)` "
                                               "bounds the warm-up and cancels what is left"),
    "specd.proxy.warmup.x_warm_up__mutmut_29": ("not covered: httpx's default 5 s timeout would cut a long "
                                               "prompt's warm-up before the 15 s budget; only a real transport "
                                               "enforces timeouts (the tests' MockTransport does not)"),
    "specd.proxy.warmup.x_warm_up__mutmut_60": ("the cancelled requests awaited before the client closes: without "
                                               "it they finish cancelling after; the same counts and timing"),
    "specd.proxy.warmup.x_warm_up_bodies__mutmut_6": ("not covered: `break` for `continue` after a body that parses "
                                                     "but cannot be written back; json's reader and writer stop at "
                                                     "the same nesting depth, so no such body was found to test"),
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_2": (
        "killed now: test_relay::"
        "test_every_byte_reaches_the_client_and_every_event_is_counted_however_the_reads_split_them"),
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_4": "killed now: the same test",
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_13": "killed now: the same test",
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_16": "killed now: the same test",
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_20": "killed now: the same test",
    "specd.proxy.relay.xǁRelayǁon_end__mutmut_1": "killed now: the same test",
    "specd.proxy.relay.xǁRelayǁon_end__mutmut_3": "killed now: the same test",
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_7": (
        "killed now: test_relay::"
        "test_whole_events_go_on_at_once_and_a_partial_one_waits_for_its_end"),
    "specd.proxy.relay.xǁRelayǁbegin__mutmut_5": (
        "killed now: test_relay::"
        "test_whole_events_go_on_at_once_and_a_partial_one_waits_for_its_end"),
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_15": (
        "killed now: test_relay::"
        "test_a_stream_without_event_boundaries_is_passed_on_in_bounded_pieces"),
    "specd.proxy.relay.xǁRelayǁ__init____mutmut_4": ("equivalent: None and b\"\" are both falsy where `_pending` is "
                                                   "tested, and the responder ends a body on either the same way"),
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_3": "equivalent: b\"\" + data is data",
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_12": "`<` or `<=` at exactly the 1 MiB bound",
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_10": ("`end == 0`: pending bytes that start with a blank "
                                                      "line and hold no other boundary; the same bytes go on, one "
                                                      "read sooner or later (llama-server sends no blank line of "
                                                      "its own)"),
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_11": ("`end == 0`: pending bytes that start with a blank "
                                                      "line and hold no other boundary; the same bytes go on, one "
                                                      "read sooner or later (llama-server sends no blank line of "
                                                      "its own)"),
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_17": ("`end == 0`: pending bytes that start with a blank "
                                                      "line and hold no other boundary; the same bytes go on, one "
                                                      "read sooner or later (llama-server sends no blank line of "
                                                      "its own)"),
    "specd.proxy.relay.xǁRelayǁon_data__mutmut_18": ("`end == 0`: pending bytes that start with a blank "
                                                      "line and hold no other boundary; the same bytes go on, one "
                                                      "read sooner or later (llama-server sends no blank line of "
                                                      "its own)"),
    "specd.proxy.relay.x_respond__mutmut_27": ("not covered: `[:2]` copies a second content-length only from "
                                              "a backend that sent two on a HEAD or 304 answer"),
    "specd.proxy.relay.x_respond__mutmut_48": "`<` or `<=` at exactly the 4 MiB scanning bound",
    "specd.proxy.relay.x_respond__mutmut_": (
        "killed now (each checked by hand): test_relay::test_a_whole_answer_is_passed_on_and_recorded_and_one_that_"
        "breaks_off_is_a_502, test_a_head_or_304_answer_keeps_the_backends_length_and_a_refused_unread_body_closes_"
        "the_connection, test_a_finished_stream_leaves_the_set_of_relays_a_shutdown_would_stop"),
}
# The eleventh session's review of the 39 rows left "to review" (proxy.py and relay.start_stream): a test for each
# that a user meets, checked by hand against its mutation (applied to the source, the named file run, restored),
# or why it is harmless.
P = "specd.proxy.proxy.xǁProxyǁ"
BY_HAND = "killed now (checked by hand): "
EARLY_SEND = ("the send on arrival is a latency shortcut: without it `_forward` sends the request itself after the "
              "gate, to the same server with the same bytes (benchmarks/results/proxy-overhead.md measures it)")
OFF_LOOP = ("equivalent but slower: the shape is read on the reader's thread instead of on the loop; the same "
            "`read_shape`, so the same shape")
NOTES.update({
    **{f"{P}{name}": (BY_HAND + REQ + "test_the_nightly_run_sees_each_request_the_proxy_accepted_also_one_"
                      "already_answered") for name in ("__init____mutmut_34", "_handle__mutmut_30",
                                                       "_handle__mutmut_31", "_handle__mutmut_32")},
    **{f"{P}_handle__mutmut_{n}": (BY_HAND + REQ + "test_a_request_that_arrives_during_the_shutdown_s_grace_"
                                   "is_answered_503_and_never_forwarded (3, 4 and 7 applied; 5 and 6 drop an "
                                   "argument, a TypeError the same test sees)") for n in (3, 4, 5, 6, 7)},
    f"{P}_handle__mutmut_2": ("the shortcut for a request that arrives during a shutdown: without it the gate's own "
                              "check answers the same 503 (`_through_gate`), after recording the request "
                              "(test_proxy_requests::test_a_request_that_arrives_during_the_... passes)"),
    **{f"{P}_handle__mutmut_{n}": ("which clock reading the exchange starts from: the request's arrival, or the "
                                   "moment its task ran microseconds later; timings only") for n in (14, 19)},
    **{f"{P}_handle__mutmut_{n}": OFF_LOOP for n in (20, 38)},
    f"{P}_handle__mutmut_22": ("a request other than POST carries no body here (GET /v1/models, /health); "
                               "`read_shape` of an empty body is the empty shape `RequestShape()` is"),
    **{f"{P}_dropped_mid_stream__mutmut_{n}": (
        BY_HAND + "test_proxy_poison::test_a_server_that_goes_down_mid_stream_is_reported_with_that_stream_as_the_"
        "likely_cause (1, 5, 6, 7, 8, 9 and 10 applied; 3, 4, 11 and 12 drop an argument, a TypeError)")
       for n in (1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)},
    f"{P}_dropped_mid_stream__mutmut_2": ("equivalent: `companion_failed`'s answer is only compared with None "
                                          "here, and the profile it is given only names the moved route"),
    f"{P}_unhealthy__mutmut_3": ("equivalent: the moved route goes to the primary (url None), whose attempts take "
                                 "the backend's profile (`_note_attempt`), never the route's"),
    f"{P}_judge_drop__mutmut_11": (
        "a GAP: a companion that drops a request on a reused connection while it still answers /health. A "
        "companion restarted under a pooled connection is met before the send (test_proxy_routing::test_a_"
        "companion_restarted_under_a_pooled_connection_keeps_its_requests passes with the mutant); the drop itself "
        "needs a companion that takes a request and closes without answering while healthy, not built"),
    **{f"{P}_read_off_loop__mutmut_{n}": (
        BY_HAND + "test_proxy_bodies::test_a_client_that_leaves_while_its_big_body_is_read_frees_the_request_"
        "already_sent (a FAKE sent request: a real client cannot leave inside the read's milliseconds)")
       for n in (2, 3, 4, 5)},
    **{f"{P}handle__mutmut_{n}": EARLY_SEND for n in (14, 17, 19)},
    f"{P}handle__mutmut_16": EARLY_SEND + "; during a shutdown the gate is closed, so nothing is sent early then "
                                          "either",
    f"{P}server__mutmut_1": "the default grace only: the daemon passes its own (SHUTDOWN_GRACE_S, specd.daemon.app)",
    "specd.proxy.relay.x_start_stream__mutmut_4": (
        "equivalent for the engines here: llama-server's and vLLM's 503 while loading is JSON, never an event "
        "stream, and neither streams a 504; the status test only matters for a 503 sent as a stream"),
})
H1 = "specd.proxy.http1."
STALL_SOON = ("how soon a stall is seen (up to twice the idle timeout late, or 1 s early while the client reads "
              "slowly): a timing bound the pass/fail suite does not assert; speed belongs to benchmarks/")
NOTES.update({
    **{f"{H1}response.xǁUpstreamResponseǁbroke__mutmut_{n}": (
        BY_HAND + "test_upstream_response::test_a_body_that_broke_off_before_the_proxy_read_it_raises_the_break_"
        "not_a_short_body") for n in (1, 2, 3)},
    f"{H1}response.xǁUpstreamResponseǁbroke__mutmut_7": (
        BY_HAND + "test_upstream_response::test_a_break_before_the_status_line_fails_the_attempt_naming_its_cause"),
    f"{H1}response.xǁ_WholeBodyǁon_end__mutmut_4": (
        BY_HAND + "test_upstream_response::test_a_body_that_came_in_several_reads_is_joined_byte_for_byte"),
    f"{H1}response.xǁUpstreamResponseǁ_check_stall__mutmut_9": (
        BY_HAND + "test_proxy_faults::test_a_stream_that_hangs_after_tokens_came_within_the_idle_timeout_is_still_"
        "ended (the stream hung to the client's timeout)"),
    **{f"{H1}response.xǁUpstreamResponseǁ_check_stall__mutmut_{n}": STALL_SOON for n in (11, 12, 13, 14)},
    f"{H1}response.xǁUpstreamResponseǁ_check_stall__mutmut_17": (
        "the exception's text: the client's error event and the traffic row say \"stalled\" from the proxy's own "
        "words (test_proxy_faults asserts them), not from this message"),
    **{f"{H1}server.xǁFrontConnectionǁ_answer_refusal__mutmut_{n}": (
        BY_HAND + "test_http1_conformance::test_huge_headers_get_431_and_the_connection_closes (its error body)")
       for n in (5, 8)},
    f"{H1}server.xǁFrontConnectionǁ_refuse__mutmut_16": (
        BY_HAND + "test_http1_conformance::test_huge_headers_get_431_and_the_connection_closes (its error body)"),
    f"{H1}server.xǁFrontConnectionǁ_refuse__mutmut_9": (
        BY_HAND + "test_http1_conformance::test_a_refusal_behind_a_request_in_progress_is_answered_in_its_turn_"
        "with_its_error"),
    f"{H1}responder.xǁResponderǁerror__mutmut_20": (
        BY_HAND + "test_http1_conformance::test_huge_headers_get_431_and_the_connection_closes (its error body)"),
    **{f"{H1}responder.xǁResponderǁerror__mutmut_{n}": (
        "a header name's case: names are case-insensitive (RFC 9110 §5.1) and every client here reads them so")
       for n in (5, 12)},
    **{f"{H1}client.xǁUpstreamPoolǁhealthy__mutmut_{n}": (
        "two guards on one bound: the probe's send has its own timeout and the block around it another; either "
        "alone ends a probe that gets no answer at `timeout_s`") for n in (1, 8)},
    **{f"specd.proxy.metrics.xǁProxyMetricsǁ__init____mutmut_{n}": (
        BY_HAND + "test_proxy_metrics::test_every_series_is_on_the_proxys_own_registry_and_two_proxies_do_not_"
        "collide") for n in (29, 46, 73, 85, 97)},
    **{f"specd.proxy.metrics.xǁProxyMetricsǁ__init____mutmut_{n}": (
        BY_HAND + "test_proxy_metrics::test_the_histograms_use_the_documented_buckets") for n in (33, 49, 63)},
    **{f"specd.proxy.metrics.xǁProxyMetricsǁ__init____mutmut_{n}": (
        "equivalent: `auto_describe` matters only for a collector without `describe()`; every series here is a "
        "prometheus_client metric, which has one") for n in (3, 4)},
    "specd.proxy.metrics.x_route_label__mutmut_2": (
        BY_HAND + "test_proxy_metrics::test_a_path_outside_the_known_routes_is_labelled_other"),
    "specd.proxy.crashes.xǁDroppedRequestǁof__mutmut_7": (
        BY_HAND + "test_proxy_poison::test_a_server_that_goes_down_mid_stream_is_reported_with_that_stream_as_the_"
        "likely_cause (its received_at)"),
})
RESPONDER = f"{H1}responder.xǁResponderǁ"
NOTES.update({
    **{f"{RESPONDER}answer__mutmut_{n}": BY_HAND + "test_responder::test_a_204_carries_no_content_length_even_when_"
       "handed_one" for n in (7, 8)},
    f"{RESPONDER}answer__mutmut_28": BY_HAND + "test_responder::test_an_error_to_a_head_request_sends_the_head_alone",
    **{f"{RESPONDER}answer__mutmut_{n}": (
        "equivalent for every caller: an answer with a body is never handed a Content-Length (the backend's is "
        "dropped as hop-by-hop by `response_headers`, and `error` builds its own headers)") for n in (12, 13)},
    f"{RESPONDER}answer__mutmut_25": "equivalent: `_head` has just set `_held`, so the `or` never takes its default",
    **{f"{RESPONDER}end__mutmut_{n}": (BY_HAND + "test_responder::test_an_end_without_a_start_is_a_500_not_a_headless_"
                                       "body (3, 4, 5 and 9 applied; 6, 7 and 8 drop an argument, a TypeError)")
       for n in (3, 4, 5, 6, 7, 8, 9)},
    f"{RESPONDER}end__mutmut_18": (
        BY_HAND + "test_responder::test_a_stream_is_chunk_framed_for_http_1_1_and_raw_for_1_0"),
    f"{RESPONDER}_flush_head__mutmut_1": (
        BY_HAND + "test_responder::test_a_stream_is_chunk_framed_for_http_1_1_and_raw_for_1_0"),
    **{f"{RESPONDER}start__mutmut_{n}": (
        "a header name's or a transfer coding's case: both are case-insensitive (RFC 9110 §5.1, RFC 9112 §7)")
       for n in (8, 10)},
    **{f"{H1}response.xǁUpstreamResponseǁclose__mutmut_{n}": (
        BY_HAND + "test_upstream_response::test_a_response_the_proxy_abandons_fails_its_waiters_with_a_connection_"
        "abort") for n in (2, 3)},
    **{f"{H1}server.xǁFrontConnectionǁenforce_deadlines__mutmut_{n}": (
        "`>` or `>=` at the exact deadline: the loop's float clock does not land on it") for n in (2, 12, 19)},
    f"{H1}server.xǁFrontConnectionǁenforce_deadlines__mutmut_3": (
        "equivalent: on a closed connection closing again or refusing again does nothing (`close` and `_refuse` "
        "check first), and the listener drops closed connections from its set"),
    f"{H1}server.xǁFrontConnectionǁenforce_deadlines__mutmut_4": (
        "reachable only by a client that pipelines a POST behind an answer that takes longer than the body timeout "
        "(the deadline then runs while the first is answered); clients and SDKs do not pipeline; no test builds it"),
})
LISTENER = f"{H1}listener.xǁFrontServerǁ"
NOTES.update({
    **{f"{LISTENER}_close_connections__mutmut_{n}": (
        BY_HAND + "test_http1_server::test_a_stopping_server_closes_idle_connections_at_once_and_lets_an_answer_in_"
        "progress_finish") for n in (2, 6)},
    f"{LISTENER}_close_connections__mutmut_4": "`<` or `<=` at the exact end of the grace: a float clock",
    f"{LISTENER}_close_connections__mutmut_8": (
        "equivalent: the connection is idle (no answer under way), and `close` on the next line ends it whatever "
        "`keep_alive` says"),
    f"{H1}server.xǁFrontConnectionǁenforce_deadlines__mutmut_21": (
        "the 408's message: text (its status and the closed connection are asserted in test_proxy_faults)"),
})
CLIENT = f"{H1}client.xǁ"
NOTES.update({
    f"{CLIENT}UpstreamPoolǁforget__mutmut_1": (
        BY_HAND + "test_http1_upstream_conformance::test_connections_the_backend_closes_are_not_kept_by_the_pool"),
    **{f"{CLIENT}UpstreamPoolǁforget__mutmut_{n}": (
        "a closed connection left in its origin's idle list: the next `_take` for that origin pops it, sees it "
        "closed and drops it, so the list does not grow") for n in (2, 3)},
    f"{CLIENT}UpstreamPoolǁsend__mutmut_1": (
        "the default only: the proxy's attempts always pass `fresh` (the re-send rule decides it); the /health "
        "probe takes the default, and a probe on a new connection answers the same "
        "(test_http1_upstream_conformance::test_consecutive_requests_share_one_backend_connection checks the reuse)"),
    f"{CLIENT}UpstreamPoolǁsend__mutmut_12": (
        "defence in depth: before a fresh re-send `_follow` discards the origin's idle connections, so `_take` "
        "finds none and a new connection is made either way"),
    **{f"{CLIENT}UpstreamPoolǁsend__mutmut_{n}": (
        "reached only with a backend address that is not http://host:port: specd writes the address from the "
        "unit's host and port, and the gate's probe of such an address fails first, holding every request")
       for n in (4, 5, 6, 7)},
    **{f"{CLIENT}BackendConnectionǁ__init____mutmut_{n}": (
        "equivalent: `release` sets `idle_since` before a connection enters the pool, and `_take` reads it only "
        "there") for n in (9, 10)},
    f"{CLIENT}BackendConnectionǁ__init____mutmut_5": (
        "equivalent: `connection_made` sets the transport before `create_connection` returns the connection, so "
        "nothing reads the initial value"),
    f"{CLIENT}BackendConnectionǁconnection_made__mutmut_2": "`cast` is for the type checker: the same object",
    **{f"{CLIENT}BackendConnectionǁ{name}": (
        "equivalent: `forget` has already taken the connection out of the pool, and pause or resume on a closing "
        "transport does nothing; `connection_lost` sets `closed` a loop turn later anyway")
       for name in ("close__mutmut_1", "close__mutmut_2", "connection_lost__mutmut_1", "connection_lost__mutmut_2")},
    f"{CLIENT}BackendConnectionǁconnection_lost__mutmut_9": (
        "equivalent: the errors a transport reports at its loss are connection errors (reset, broken pipe), which "
        "the re-send rule reads as a drop exactly as it reads the ConnectionResetError put in their place"),
    f"{CLIENT}BackendConnectionǁconnection_lost__mutmut_11": "the exception's message: text",
    f"{LISTENER}_close_connections__mutmut_3": (
        BY_HAND + "test_http1_server::test_a_server_with_no_connection_left_stops_at_once_not_at_the_end_of_its_grace"),
    f"{LISTENER}_close_connections__mutmut_10": (
        "how often a stopping server looks for finished answers (every 0.05 s or 1.05 s): how soon it stops, "
        "not whether an answer finishes"),
})
NOTES.update({
    f"{CLIENT}BackendConnectionǁon_message_complete__mutmut_10": (
        BY_HAND + "test_http1_upstream_conformance::test_after_an_answer_that_says_connection_close_the_next_request_"
        "goes_on_a_new_connection"),
    f"{CLIENT}BackendConnectionǁon_message_complete__mutmut_8": (
        "equivalent: `served` is read only as `served > 0` (was the connection used before)"),
    f"{CLIENT}UpstreamPoolǁ_connect__mutmut_5": (
        BY_HAND + "test_http1_upstream_conformance::test_a_backend_on_another_loopback_address_is_reached_there"),
    f"{CLIENT}UpstreamPoolǁ_connect__mutmut_16": (
        "the cause's name goes to the log line and the drop's judgement text, not to a decision"),
    f"{CLIENT}UpstreamPoolǁ_connect__mutmut_2": (
        "a GAP: a backend that never completes the TCP handshake (a black hole). On loopback a closed port "
        "refuses at once and a listening one accepts, so no test builds one; the gate's /health probe, bounded "
        "on its own, meets such a backend first"),
    **{f"{CLIENT}UpstreamPoolǁsend__mutmut_{n}": (
        "a new connection instead of an idle one: one more connect, the same answer. The first attempt takes an "
        "idle connection in `send_now` (test_consecutive_requests_share_one_backend_connection); `send` runs when "
        "none was idle, or for a held request") for n in (13, 14)},
    f"{CLIENT}UpstreamPoolǁsend__mutmut_29": (
        "the stream is relayed from the request's task instead of the connection's callback (`respond` calls "
        "`start_stream` itself): the same bytes, a loop turn later"),
    f"{H1}listener.x_connection_budget__mutmut_4": (
        "reached only without /proc/self/fd, which Linux always has (specd runs under systemd on Linux)"),
    **{f"{H1}listener.x_connection_budget__mutmut_{n}": (
        "reached only with an unlimited open-files limit, which Linux does not allow (RLIMIT_NOFILE is capped by "
        "fs.nr_open)") for n in (6, 7, 8, 9)},
    f"{H1}listener.x_connection_budget__mutmut_14": (
        "a float cap compares with the connection count the same; only the cap's warning would print it as 512.0"),
})
SERVE = f"{LISTENER}serve__mutmut_"
NOTES.update({
    f"{H1}bodies.xǁHeldBytesǁ__init____mutmut_5": (
        "the peak's start value (1 byte, not 0): `max` gives the same once a byte is held (test_body_shape reads it)"),
    f"{LISTENER}__init____mutmut_12": (
        "the count of refused connections had no reader: removed since (its refusals are asserted by their 503, "
        "test_proxy_limits)"),
    f"{LISTENER}__init____mutmut_6": "equivalent: the loop's clock is far past 1.0 s at start, so the first sweep is "
                                    "due at once either way",
    f"{LISTENER}__init____mutmut_8": (
        "whether the first cap warning may be logged in the first minute after boot (the clock is monotonic "
        "since boot): the journal's volume"),
    **{f"{SERVE}{n}": ("the listen backlog (511, 512 or asyncio's 100): how many connections may wait to be "
                       "accepted; test_proxy_faults' 300 clients at once are each answered with any of them")
       for n in (12, 14, 19, 23, 24)},
    **{f"{SERVE}{n}": ("the host-and-port branch had no caller (the daemon and the tests hand the server a bound "
                       "socket): removed since, a missing socket is now a ValueError")
       for n in (2, 15, 16, 17, 18, 20, 21, 22)},
    **{f"{SERVE}{n}": ("how often the deadlines are swept (a quarter of the shortest timeout, at most 1 s): how late "
                       "past its deadline a slow client is closed, not whether") for n in (28, 32, 33, 34, 35, 36)},
    "specd.proxy.warmup.xǁRecentRequestsǁ__init____mutmut_4": (
        "the kept bytes' start count (1, not 0): the bound on remembered bodies is reached one byte sooner"),
})
RESPONSE = f"{H1}response.xǁUpstreamResponseǁ"
NOTES.update({
    f"{CLIENT}BackendConnectionǁbegin__mutmut_1": "an assertion of the pool's own invariant: it holds either way",
    f"{CLIENT}BackendConnectionǁbegin__mutmut_14": (
        BY_HAND + "test_http1_upstream_conformance::test_a_request_dropped_on_a_kept_alive_connection_is_sent_once_"
        "more_on_a_new_one"),
    f"{CLIENT}BackendConnectionǁdata_received__mutmut_5": (
        BY_HAND + "test_http1_upstream_conformance::test_an_answer_that_is_not_valid_http_is_a_502_sent_once"
        "[bad-chunk-after-the-head]"),
    f"{CLIENT}BackendConnectionǁdata_received__mutmut_6": "the exception's message: text",
    **{f"{CLIENT}BackendConnectionǁon_headers_complete__mutmut_{n}": (
        "equivalent: llhttp ends a 204 or 304 at its head whatever its headers (it knows they carry no body), so "
        "`close_delimited` is never read for them (test_a_204_or_304_without_a_length_ends_at_its_head_not_at_"
        "the_backends_close)") for n in (15, 16)},
    **{f"{CLIENT}UpstreamPoolǁ_begin__mutmut_{n}": (
        "which requests carry `content-length: 0`: a bodiless GET may (RFC 9110 §8.6), and a POST without one "
        "has no body (RFC 9112 §6.3); llama-server reads both alike") for n in (3, 7, 8)},
    f"{CLIENT}UpstreamPoolǁ_begin__mutmut_17": "codec names are case-insensitive: \"ASCII\" is \"ascii\"",
    f"{CLIENT}UpstreamPoolǁ_begin__mutmut_18": (
        "`<=` or `<` at the exact size where the body goes in its own write: the same bytes on the wire"),
    f"{SERVE}43": "how often the serving loop wakes (0.1 s or the sweep's period): how soon `should_exit` is seen",
    f"{SERVE}45": "`>=` or `>` at the exact sweep time: a float clock",
    f"{SERVE}47": "a sweep on every wake instead of every period: more work, the same deadlines",
    f"{RESPONSE}attach__mutmut_5": (
        BY_HAND + "test_upstream_response::test_a_body_that_broke_off_before_the_proxy_read_it_raises_the_break_"
        "not_a_short_body"),
    **{f"{RESPONSE}headers_done__mutmut_{n}": (
        BY_HAND + REQ + "test_a_request_held_while_the_backend_loads_logs_no_error") for n in (2, 3)},
})
NOTES.update({
    f"{RESPONSE}__init____mutmut_1": "the default only: `BackendConnection.begin`, its one maker, passes `reused`",
    f"{RESPONSE}__init____mutmut_15": "equivalent: `set_read_timeout` at the end of `__init__` sets it again",
    f"{RESPONSE}__init____mutmut_22": (
        "reached only when an early-sent request's status line arrives before its task sets the hook (a backend "
        "answering within one loop turn): then one logged \"proxy error\" line, and `respond` relays the same answer"),
    f"{RESPONSE}__init____mutmut_5": (
        "the early send's time, where the recorded hold ends: with None the hold ends when the task runs, "
        "microseconds later (timings only)"),
})
GONE = ("equivalent: the request's task then ends cancelled instead of returning, and the server treats both alike "
        "(`_handled` logs only an exception); a shutdown's own cancellation is turned into its 503 before it reaches "
        "here (`_cut`, `_ShutDownWhileWaiting`)")
NOTES.update({
    "specd.proxy.attempts.xǁAttemptsǁend__mutmut_1": (
        BY_HAND + "test_proxy_routing::test_after_requests_to_both_servers_the_drain_finds_the_primary_idle"),
    **{f"{CLIENT}UpstreamPoolǁsend_now__mutmut_{n}": EARLY_SEND for n in (1, 2, 3, 4)},
    f"{RESPONSE}_stop_timer__mutmut_2": (
        "equivalent in the sequences the proxy makes: the read timeout is set once after the send and the response "
        "ends once, so no `_stop_timer` follows one that found a timer"),
    **{f"{P}_handle__mutmut_{n}": (
        "a GAP in the wiring only: `_read_off_loop`'s abandon path is tested alone (test_proxy_bodies::test_a_"
        "client_that_leaves_while_its_big_body_is_read_...); a client leaving inside the read's milliseconds "
        "through the whole proxy is not built") for n in (42, 43)},
    **{f"{P}_handle__mutmut_{n}": (
        BY_HAND + REQ + "test_a_client_that_leaves_before_the_answer_is_recorded_as_gone_without_an_error")
       for n in (74, 76)},
    **{f"{P}_handle__mutmut_{n}": GONE for n in (80, 81, 82, 83, 84, 85, 86)},
    **{f"{P}_handle__mutmut_{n}": (
        "the record of a request whose task raised (a proxy bug): its status and text; no test can raise a bug "
        "inside `_forward` without a FAKE of the proxy itself, and the error is logged either way")
       for n in (87, 88, 89, 90, 91)},
    f"{P}_remember__mutmut_1": BY_HAND + REQ + "test_a_chat_request_is_remembered_for_the_next_flips_warm_up",
    **{f"specd.proxy.relay.xǁClientWatchǁclose__mutmut_{n}": (
        "equivalent: `close` runs in `_handle`'s `finally`, after which the connection no longer reports a leave "
        "to this watch (its responder has ended)") for n in (1, 2)},
})
FWD = f"{P}_forward__mutmut_"
NOTES.update({
    f"{FWD}5": (BY_HAND + "test_proxy_faults::test_a_non_streamed_answer_slower_than_the_stream_idle_timeout_is_"
                "waited_for"),
    **{f"{FWD}{n}": BY_HAND + REQ + "test_held_past_the_hold_timeout_while_loading_the_client_gets_the_backends_"
       "own_503" for n in (15, 85, 87, 88, 90)},
    f"{FWD}89": ("a companion's 503 body kept as the primary's: it shows only when a companion answered \"Loading "
                 "model\" and the primary's hold then expired, and both say the same"),
    **{f"{FWD}{n}": ("defence in depth: before a fresh re-send `_follow` discards the server's idle connections, "
                     "so the next attempt gets a new connection whatever `fresh` says") for n in (31, 32, 39)},
    f"{FWD}9": "a first attempt on a new connection instead of an idle one: one more connect, the same answer",
    **{f"{FWD}{n}": (BY_HAND + REQ + "test_a_request_held_while_the_backend_loads_logs_no_error (its stream: the "
                     "hook's error was logged; 47, 48 and 49 drop an argument the same way as 46)")
       for n in (43, 46, 47, 48, 49)},
    **{f"{FWD}{n}": (BY_HAND + "test_proxy_poison::test_a_server_that_goes_down_mid_stream_is_reported_with_that_"
                     "stream_as_the_likely_cause (79 and 80 drop an argument as 78 does)")
       for n in (74, 75, 76, 77, 78, 79, 80)},
    f"{FWD}93": ("equivalent: the re-send rule reads `answers_health_now` only after a drop, and a drop's value comes "
                 "from `_judge_drop`"),
    f"{P}_remember__mutmut_3": BY_HAND + REQ + "test_a_chat_request_is_remembered_for_the_next_flips_warm_up",
    f"{P}_remember__mutmut_17": BY_HAND + REQ + "test_a_captured_body_carries_the_concurrency_it_arrived_at",
})
GATE = f"{P}_through_gate__mutmut_"
NOTES.update({
    f"{GATE}8": BY_HAND + "test_proxy::test_metrics_count_every_request_and_traffic_only_completions (the hold sum)",
    f"{GATE}23": BY_HAND + "test_proxy::test_requests_sent_while_the_backend_restarts_are_held_not_failed (hold count)",
    **{f"{GATE}{n}": (BY_HAND + REQ + "test_held_past_the_hold_timeout_while_loading_the_client_gets_the_"
                      "backends_own_503 (30, 31, 38, 39 and 40 drop an argument, a TypeError)")
       for n in (28, 29, 30, 31, 32, 35, 36, 37, 38, 39, 40, 41, 42)},
    f"{GATE}43": "a header name's case: case-insensitive (RFC 9110 §5.1)",
    **{f"{GATE}{n}": ("the early send's time, where the recorded hold ends: without it the hold ends when the task "
                      "runs, microseconds later (timings only)") for n in (13, 16, 17)},
    f"{FWD}100": "the cause's name in the drop's judgement text: text",
    **{f"{FWD}{n}": ("which server's idle connections `_follow` discards before a fresh re-send: defence in depth, "
                     "the re-send asks for a fresh connection itself") for n in (113, 114, 123)},
    **{f"{FWD}{n}": ("defence in depth: `_follow` discards the server's idle connections before this re-send, so it "
                     "gets a new connection whatever `fresh` says") for n in (130, 131)},
})
NA, SU = f"{P}_note_attempt__mutmut_", f"{P}_send_upstream__mutmut_"
NOTES.update({
    "specd.proxy.attempts.xǁAttemptsǁbegin__mutmut_1": (
        BY_HAND + "test_proxy_routing::test_after_requests_to_both_servers_the_drain_finds_the_primary_idle"),
    f"{NA}3": ("equivalent: a route to the primary is made with the primary's profile (`route_now`, `_pick`, "
               "`companion_failed`), so reading it from the route or from the backend gives the same name"),
    **{f"{NA}{n}": ("the count of attempts per request had no reader: removed since (the re-send rule keeps its own, "
                    "`resend.Resends`)") for n in (5, 6, 7)},
    **{f"{NA}{n}": (BY_HAND + "test_proxy::test_requests_sent_while_the_backend_restarts_are_held_not_failed (a hold "
                    "is never longer than the request)") for n in (9, 11)},
    f"{NA}10": "a 0.1% scale on the recorded hold (1001 for 1000 ms per second): timings only",
    f"{NA}13": ("the early send's time, where the recorded hold ends: without it the hold ends when the task runs, "
                "microseconds later (timings only)"),
    f"{SU}1": "the default only: `_forward`, its one caller, always passes `fresh`",
    **{f"{SU}{n}": ("defence in depth: before a fresh re-send `_follow` discards the server's idle connections, so "
                    "a new connection is made whatever `fresh` says") for n in (13, 21)},
    **{f"{SU}{n}": ("the stream is relayed from the request's task instead of the connection's callback (`respond` "
                    "calls `start_stream` itself): the same bytes, a loop turn later") for n in (12, 20, 24)},
    f"{SU}29": BY_HAND + "test_proxy::test_requests_sent_while_the_backend_restarts_are_held_not_failed (nothing "
                         "kept per request)",
    f"{SU}30": "equivalent: `_cut` holds tasks only once a shutdown cut them, and the proxy ends then",
    **{f"{GATE}{n}": (BY_HAND + REQ + "test_held_past_the_hold_timeout_while_loading_the_client_gets_the_"
                      "backends_own_503 (its content type; media types are case-insensitive, so 45 is stricter "
                      "than a client)") for n in (44, 45)},
    **{f"{GATE}{n}": BY_HAND + "test_proxy::test_hold_timeout_answers_503_instead_of_hanging" for n in (49, 56)},
})
REC = "specd.proxy.exchange.xǁRecordingǁ__call____mutmut_"
NOTES.update({
    "specd.proxy.attempts.xǁAttemptsǁroute_now__mutmut_11": (
        "equivalent: a route to the primary (url None) is recorded with the backend's profile (`_note_attempt`), "
        "never the route's"),
    **{f"specd.proxy.attempts.xǁAttemptsǁroute_now__mutmut_{n}": (
        "the request still goes to the primary: with routing off `pick` finds no companion and no stamp, and an "
        "empty body has no messages to route by; only a task-class label on the route differs, unused for the "
        "primary") for n in (2, 3)},
    "specd.proxy.exchange.xǁExchangeǁfinish__mutmut_1": (
        BY_HAND + "test_exchange::test_an_exchange_is_recorded_once_however_often_it_is_finished"),
    **{f"specd.proxy.exchange.xǁExchangeǁof_request__mutmut_{n}": (
        BY_HAND + "test_exchange::test_an_exchange_starts_when_its_request_was_whole_not_when_it_was_made")
       for n in (5, 9)},
    **{f"{REC}{n}": "the traffic log line's error suffix: the journal's text" for n in (6, 16, 17)},
    **{f"{REC}{n}": ("the cache of labelled metric children: without it `labels()` is called each time, the same "
                     "series") for n in (22, 23)},
    f"{REC}31": BY_HAND + "test_proxy::test_metrics_count_every_request_and_traffic_only_completions (latency label)",
    f"{REC}37": BY_HAND + "test_proxy::test_metrics_count_every_request_and_traffic_only_completions (TTFT in s)",
    f"{REC}38": "a 0.1% scale on the TTFT histogram (1001 for 1000 ms per second): timings only",
    "specd.proxy.http1.client.x_forwarded_headers__mutmut_14": (
        "header names and content codings are case-insensitive (RFC 9110 §5.1, §8.4.1)"),
    "specd.proxy.http1.client.x_hop_by_hop__mutmut_9": (
        BY_HAND + "test_http1_upstream_conformance::test_headers_named_in_connection_stay_on_their_hop_both_ways "
        "(now with a list written without spaces)"),
    "specd.proxy.relay.xǁClientWatchǁ__init____mutmut_6": GONE,
    **{f"specd.proxy.warmup.xǁRecentRequestsǁnote__mutmut_{n}": (
        "`<` or `<=` at the exact byte bound of remembered bodies: one body of exactly that size") for n in (5, 16)},
})
EX = "specd.proxy.exchange.xǁExchangeǁ"
NOTES.update({
    f"{EX}__init____mutmut_14": (
        "a request never sent keeps its start value (1 ms for 0); a held one now records its hold when refused "
        "(test_proxy::test_hold_timeout_answers_503_instead_of_hanging: held_ms >= the timeout)"),
    **{f"{EX}__init____mutmut_{n}": ("a falsy start value (\"\" for None) of a field set before it is read, or "
                                     "read only for truth") for n in (20, 23, 24)},
    f"{EX}__init____mutmut_22": "the count of attempts had no reader: removed since",
    **{f"{EX}__init____mutmut_{n}": ("equivalent: `of_request`, the proxy's one maker, sets `recorded` from the "
                                     "method at once") for n in (25, 26)},
    f"{EX}__init____mutmut_9": "equivalent: `take` sets `stream` from the body's shape before anything reads it",
    f"{EX}finish__mutmut_11": BY_HAND + "test_proxy::test_non_streaming_request_passes_through_with_auth_and_is_"
                                        "recorded (total_ms)",
    f"{EX}finish__mutmut_2": BY_HAND + "test_exchange::test_an_exchange_is_recorded_once_however_often_it_is_finished",
    f"{H1}bodies.xǁBodyBufferǁadd__mutmut_2": BY_HAND + "test_proxy::test_bad_bodies_do_not_wedge_the_proxy (a body "
                                                        "of exactly the limit is taken)",
    **{f"{CLIENT}UpstreamPoolǁ_take__mutmut_{n}": (
        "equivalent: a closed connection is taken out of the idle list when it closes (`forget`), so `_take` meets "
        "only open ones; and `<` or `<=` at the exact keep time") for n in (5, 8)},
    f"{H1}server.xǁFrontConnectionǁ_handled__mutmut_4": (
        "equivalent: `_next` sets `_request` to the next request before that request's task can end"),
    **{f"{H1}server.xǁFrontConnectionǁ_handled__mutmut_{n}": (
        BY_HAND + "test_http1_server::test_a_handler_that_raises_answers_500_logs_the_error_and_keeps_the_connection")
       for n in (5, 7, 8)},
    f"{H1}server.xǁFrontConnectionǁ_handled__mutmut_6": (
        "not killed: it matters only for a request task that ends cancelled, which the proxy's own handler never "
        "does (it turns a client's leave into a return, a shutdown's cut into a 503); `exception()` of a cancelled "
        "task would raise in the callback"),
})
HANDLED = f"{H1}server.xǁFrontConnectionǁ_handled__mutmut_"
NOTES.update({
    f"{HANDLED}20": (BY_HAND + "test_http1_server::test_a_stream_its_handler_breaks_off_ends_with_the_connection_not_a_"
                     "clean_last_chunk"),
    **{f"{HANDLED}{n}": ("equivalent: the handler's task has ended, so nothing writes to this responder again, and "
                         "the connection closes (`keep_alive` is false)") for n in (21, 22)},
    **{f"{HANDLED}{n}": (BY_HAND + "test_http1_server::test_a_handler_that_raises_answers_500_logs_the_error_and_keeps_"
                         "the_connection (its error body; 26 and 27 drop an argument as 28 does)")
       for n in (23, 24, 25, 26, 27, 28)},
})
NOTES.update({
    f"{H1}server.xǁFrontConnectionǁ_release__mutmut_3": (
        "equivalent: a request's bytes are given back once (when it is answered, refused or dropped), so its count "
        "after that is never read (test_http1_server::test_every_body_s_bytes_are_given_back_once_answered)"),
    f"{H1}server.xǁFrontConnectionǁ_next__mutmut_1": (
        "a GAP: requests pipelined behind one whose client left. While an answer is under way the server pauses "
        "reading, so it learns of the leave only from a failed write, and `_next` may run first either way; no "
        "test makes that order certain (clients and SDKs do not pipeline)"),
})
FC = f"{H1}server.xǁFrontConnectionǁ"
NOTES.update({
    f"{H1}bodies.xǁBodyBufferǁtake__mutmut_3": (
        "equivalent: every request's head empties the buffer again before its body (`on_message_begin` drops it)"),
    f"{H1}responder.xǁResponderǁ_finish__mutmut_3": (
        "equivalent: `client_left` calls the hook only while the answer has not ended, and `_finish` has ended it"),
    **{f"{FC}_next__mutmut_{n}": (BY_HAND + "test_http1_server::test_a_handler_that_fails_before_its_task_answers_500_"
                                  "and_closes_the_connection (34, 35 and 36 drop an argument as 31 to 33 change one)")
       for n in (27, 28, 30, 31, 32, 33, 34, 35, 36, 37)},
    **{f"{FC}connection_lost__mutmut_{n}": (
        "a GAP with `_next` 1's: what `closed` stops after a client left is the handling of requests it pipelined, "
        "which no test can order; the handler hears of the leave by `client_left`, called here all the same")
       for n in (1, 2)},
    f"{FC}on_message_complete__mutmut_10": (
        "equivalent: an empty `_owes` matches neither \"headers\" nor \"body\" in the deadline sweep, as None does"),
    f"{FC}on_message_complete__mutmut_16": (
        "reading is not paused while an answer is under way: the next requests are parsed early and queued, still "
        "bounded by the head and body limits and the held-bytes budget"),
    f"{FC}on_message_complete__mutmut_4": "one byte more counted against the next request's head limit: at the bound",
    **{f"{FC}on_message_complete__mutmut_{n}": (
        "equivalent: a closed connection gets no more data, and a request is None here only when it was refused")
       for n in (5, 6)},
    f"{FC}on_message_complete__mutmut_9": (
        "the request's arrival time: without it the exchange starts when its task runs, microseconds later"),
})
NOTES.update({
    f"{H1}responder.x_no_body__mutmut_4": BY_HAND + "test_responder::test_a_304_keeps_the_length_it_was_handed_and_"
                                                    "sends_no_body",
    **{f"{FC}connection_lost__mutmut_{n}": (
        "a GAP with `_next` 1's: the bytes of requests a client pipelined and then left; while an answer is under "
        "way reading is paused, so the leave is learnt only from a failed write, which no test can time")
       for n in (4, 5)},
    f"{FC}connection_lost__mutmut_8": (
        "equivalent: after the connection is lost nothing pauses or resumes its writing again"),
})
NOTES.update({
    **{f"{H1}responder.xǁResponderǁ_head__mutmut_{n}": (
        BY_HAND + "test_responder::test_a_status_without_a_standard_reason_goes_out_with_an_empty_reason")
       for n in (8, 9)},
    f"{FC}on_headers_complete__mutmut_10": (
        "equivalent: llhttp accepts only token characters in a method, so strict ASCII decoding never fails"),
    f"{FC}on_headers_complete__mutmut_4": (
        "a GAP: a request refused inside its head (431, 414) would go on to its body's checks, and with `Expect: "
        "100-continue` a 100 could follow the refusal on the wire; the connection closes after the refusal, and no "
        "test sends that combination"),
    f"{FC}response_ended__mutmut_1": (
        "not killed: after a throttled stream, a later whole answer that fills the socket buffer would meet an empty "
        "string as its throttle in `pause_writing` (asyncio logs the failed callback; the bytes still go out); no "
        "test sends that sequence"),
    f"{FC}response_ended__mutmut_3": (
        "equivalent: when an answer ends, `_responder` is set only while the handler's task is still running "
        "(`_handled` and the failure paths clear it first)"),
    f"{FC}response_ended__mutmut_12": "equivalent: resuming reading on a closed transport does nothing",
    **{f"{FC}send__mutmut_{n}": (
        "equivalent: there is a transport from `connection_made` on, and asyncio drops writes to a closing one")
       for n in (1, 2)},
})
NOTES.update({
    **{f"{LISTENER}admit__mutmut_{n}": (
        "equivalent: `_evict_idle` closes at least EVICT_BATCH idle connections, more than the one or two the count "
        "is off by") for n in (5, 7)},
    f"{LISTENER}admit__mutmut_9": "the count of refused connections had no reader: removed since",
    f"{H1}responder.xǁResponderǁ__init____mutmut_10": (
        "equivalent for the proxy: every request's responder gets its leave hook at once (`ClientWatch`), "
        "replacing the start value"),
    f"{H1}responder.xǁResponderǁ__init____mutmut_5": "equivalent: `_head` sets the held head before anything reads it",
    **{f"{FC}on_url__mutmut_{n}": (BY_HAND + "test_http1_conformance::test_a_target_over_the_limit_in_pieces_each_"
                                   "under_it_gets_414_and_one_at_the_limit_is_taken") for n in (1, 3, 5)},
    f"{FC}on_url__mutmut_9": (
        "equivalent: a refused request is never handled, and `_partial` is made afresh at each request's start"),
})
NOTES.update({
    **{f"{LISTENER}admit__mutmut_{n}": "the count of refused connections had no reader: removed since"
       for n in (10, 11)},
    f"{LISTENER}admit__mutmut_12": "the cap's warning text (`_warn` logs it): the journal's wording",
})
NOTES.update({
    **{f"{FC}__init____mutmut_{n}": (
        "equivalent: a start value set again before anything reads it (`connection_made`: the transport; "
        "`on_message_begin`: the partial request, its headers and the target's size; `_next`: the request and "
        "its task)") for n in (5, 6, 7, 13, 19, 22)},
})
NOTES.update({
    f"{FC}connection_made__mutmut_2": "`cast` is for the type checker: the same object",
    **{f"{FC}connection_made__mutmut_{n}": (
        "equivalent: the transport is closed two lines on, and `connection_lost` marks the connection closed before "
        "anything else reads it") for n in (8, 9)},
    **{f"{FC}data_received__mutmut_{n}": (BY_HAND + "test_http1_conformance::test_headers_over_the_limit_in_pieces_"
                                          "each_under_it_get_431") for n in (5, 7)},
    f"{FC}data_received__mutmut_13": (BY_HAND + "test_http1_conformance::test_huge_headers_get_431_and_the_"
                                      "connection_closes (its message)"),
})
NOTES.update({
    f"{FC}data_received__mutmut_17": (
        "equivalent: feeding nothing does nothing, and after a refusal every parser callback returns at once"),
    f"{FC}data_received__mutmut_21": (BY_HAND + "test_http1_conformance::test_an_upgrade_request_is_answered_as_plain_"
                                      "http (its `connection: close`)"),
    **{f"{FC}data_received__mutmut_{n}": (
        "when a big upload yields the loop (one read per turn, others' turns between): fairness between "
        "connections, measured in benchmarks/results/hostile-bodies.md, not asserted") for n in (31, 32, 35, 36)},
})
NOTES.update({
    f"{H1}bodies.xǁBodyBufferǁ__init____mutmut_2": (
        "equivalent: an empty body is only tested for truth before the first part replaces it, and every request's "
        "start empties it again (`drop`)"),
    f"{FC}on_message_begin__mutmut_12": (BY_HAND + "test_http1_conformance::test_a_target_over_the_limit_in_pieces_"
                                         "each_under_it_gets_414_and_one_at_the_limit_is_taken (the one at the limit)"),
    **{f"{FC}on_message_begin__mutmut_{n}": (
        "equivalent: the method is set from the parser at the end of the head, before anything reads it")
       for n in (2, 8)},
})
# The twelfth session: the GAP and "not killed" rows answered (each checked by hand: the mutation applied to
# the file, the named test run, restored).
VANISH, LEAVES, SERVER = "test_proxy_vanishing_peers::", "test_http1_client_leaves::", "test_http1_server::"
NOTES.update({
    f"{CLIENT}UpstreamPoolǁ_connect__mutmut_2": (
        BY_HAND + f"{VANISH}test_a_backend_that_never_accepts_is_answered_503_at_the_hold_timeout_not_left_hanging "
        "(a real black hole on loopback: a listener with listen(0) and its accept queue filled drops the SYN)"),
    f"{FC}_next__mutmut_1": (
        BY_HAND + f"{LEAVES}test_requests_pipelined_behind_one_in_progress_are_dropped_with_their_bytes_when_the_"
        "client_leaves (the connection driven as the asyncio protocol it is, on a FAKE transport, so the order "
        "of the leave and the first answer's end is certain)"),
    **{f"{FC}connection_lost__mutmut_{n}": (
        BY_HAND + f"{LEAVES}test_requests_pipelined_behind_one_in_progress_are_dropped_with_their_bytes_when_the_"
        "client_leaves") for n in (1, 2, 4, 5)},
    **{f"{P}_handle__mutmut_{n}": (
        BY_HAND + f"{VANISH}test_a_client_that_leaves_while_its_big_body_is_read_frees_the_backend_it_was_already_"
        "sent_to (through the whole proxy; a FAKE slow shape reader holds the read while the client leaves)")
       for n in (42, 43)},
    f"{P}_judge_drop__mutmut_11": (
        BY_HAND + f"{VANISH}test_a_companion_that_drops_a_request_on_a_kept_alive_connection_while_healthy_gets_it_"
        "once_more"),
    f"{H1}server.xǁFrontConnectionǁ_handled__mutmut_6": (
        BY_HAND + f"{SERVER}test_a_handler_cancelled_before_it_answered_gets_the_client_a_500_and_the_connection_"
        "goes_on"),
    f"{FC}response_ended__mutmut_1": (
        BY_HAND + f"{SERVER}test_a_big_whole_answer_to_a_slow_reader_after_a_stream_arrives_whole_and_logs_no_error"),
    f"{FC}on_headers_complete__mutmut_4": (
        "equivalent on the wire: a 431 is raised while the head is incomplete, so `on_headers_complete` never runs "
        "for it; for a 414 the refusal is already written and the write side shut (`write_eof`), so the mutant's "
        "100 Continue raises RuntimeError in the parser's callback, which `data_received` turns into a refusal of "
        "an already refused request: nothing more is sent or logged (seen with an instrumented run; asyncio's own "
        "transports refuse a write after write_eof the same way)"),
})

"""Why each surviving mutant of specd/deploy/ is harmless, or which test now kills it (read by
benchmarks/mutation_report.py --layer deploy). Keys: a mutant's name, a function's, a `..._mutmut_` prefix,
or any prefix ending in `*`.

Reasons used more than once are named once here."""

D = "specd.deploy."
ACTED = ("equivalent: an undo's True/False only feeds `acted` (\"nothing was changed\" or not), and whenever this "
         "undo runs the write step's undo acts too, so `acted` is the same")
HOOK = ("the step hook's detail or the step's note (`run.passed(point, text)`, `run.notes[-1]`): text for the status "
        "page and the switch's notes; no behaviour reads it")
WHERE = ("the file named in a parse error (`where=`) of a unit text that was parsed before this line: the error "
         "cannot happen here, so the name is never shown")
REACHABLE = ("equivalent in reachable states: blue-green runs only beside a running old server (the plan refuses "
             "it otherwise, test_bluegreen), so there is always an old unit text and a saved PID")
ROOT = ("not killed here: the unit tests run as root, where lowering and raising a nice value is always allowed; "
        "the rule itself is `may_raise_to`, tested on its own (test_priority)")
SECOND_NET = ("defence in depth: `_undo_restart` already restarts an old server that died before the revert "
              "(test_plans::test_an_old_server_that_died_during_an_interrupted_switch_is_brought_back); this branch "
              "is for one that dies between the undo and the settle, which no test can time")

NOTES: dict[str, str] = {
    # bluegreen
    f"{D}bluegreen.x__drain": HOOK,
    f"{D}bluegreen.x__flip__mutmut_19": HOOK, f"{D}bluegreen.x__flip__mutmut_20": HOOK,
    f"{D}bluegreen.x__enable__mutmut_21": HOOK, f"{D}bluegreen.x__enable__mutmut_22": HOOK,
    f"{D}bluegreen.x__flip_note": "what the switch's note says about telling the proxy: text",
    f"{D}bluegreen.x__undo_flip__mutmut_10": HOOK, f"{D}bluegreen.x__undo_flip__mutmut_12": HOOK,
    f"{D}bluegreen.x__undo_flip__mutmut_15": ACTED, f"{D}bluegreen.x__undo_enable__mutmut_10": ACTED,
    f"{D}bluegreen.x__undo_enable__mutmut_21": ACTED, f"{D}bluegreen.x__undo_stop_old__mutmut_2": ACTED,
    f"{D}bluegreen.x__undo_stop_old__mutmut_4": ACTED,
    f"{D}bluegreen.x__old_kept__mutmut_12": REACHABLE, f"{D}bluegreen.x__save_enabled__mutmut_3": REACHABLE,
    f"{D}bluegreen.x__save_old_server__mutmut_3": REACHABLE, f"{D}bluegreen.x__save_old_server__mutmut_16": REACHABLE,
    **{f"{D}bluegreen.x__save_old_server__mutmut_{n}": ("equivalent: systemd reports MainPID 0 for a unit that "
                                                        "is not running, so the PID saved is 0 either way")
       for n in (9, 10)},
    f"{D}bluegreen.x__save_old_server__mutmut_12": ("a stopped old server's saved PID 1 instead of 0: no running "
                                                    "llama-server has PID 1 (init), so `_old_kept` answers the same"),
    f"{D}bluegreen.x__drain_old__mutmut_10": WHERE,
    f"{D}bluegreen.x__drain_old__mutmut_11": "the polling client's timeout (5 s, 6 s or httpx's default): how long "
                                             "one poll of /slots may take, not what the drain decides",
    f"{D}bluegreen.x__drain_old__mutmut_12": "the polling client's timeout (5 s, 6 s or httpx's default): how long "
                                             "one poll of /slots may take, not what the drain decides",
    f"{D}bluegreen.x__drain_old__mutmut_24": ("equivalent in production: the seams' clock is the system clock; over "
                                              "the fakes the old server is idle at the first poll"),
    f"{D}bluegreen.x__drain_old__mutmut_16": ("a GAP left: the drain's polls without the API key; against a server "
                                              "started with --api-key, /slots and /metrics would answer 401 and the "
                                              "drain would judge the load unknown and stop the old server at once. "
                                              "The unit tests' old server is a fake unit with no HTTP server"),
    f"{D}bluegreen.x__drain_old__mutmut_22": ("a GAP left: the drain's polls without the API key (as _mutmut_16)"),
    f"{D}bluegreen.x_settled__mutmut_2": "the name in the settle sentence when the old unit had no profile: text",
    **{f"{D}bluegreen.x_settled__mutmut_{n}": ("killed now: test_bluegreen::test_an_old_server_that_died_on_its_own_"
                                               "during_a_failed_switch_is_brought_back")
       for n in (11, 12, 13, 14, 19, 20, 21)},
    # steps
    f"{D}steps.x__start__mutmut_4": ("killed now (checked by hand): test_bluegreen::test_history_records_how_long_"
                                     "each_part_of_a_switch_and_a_rollback_took (its blue-green switch)"),
    **{f"{D}steps.x__start__mutmut_{n}": ("a GAP left: lowering the priority of MainPID 0 or 1; the fakes' units "
                                          "always have a PID, and a started llama-server unit always has one")
       for n in (7, 10, 11)},
    f"{D}steps.x__undo_start__mutmut_3": HOOK, f"{D}steps.x__undo_start__mutmut_8": ACTED,
    f"{D}steps.x_previous_text__mutmut_11": "the message of a revert that lost the previous text: text",
    **{f"{D}steps.x_restart_settled__mutmut_{n}": "the settle sentence's wording: text" for n in (3, 4, 25, 26)},
    **{f"{D}steps.x_restart_settled__mutmut_{n}": SECOND_NET for n in range(30, 40)},
    f"{D}steps.x_restart_from_file__mutmut_5": "the message when the unit file is gone: text",
    f"{D}steps.x_restart_from_file__mutmut_7": ("not killed over fakes (they ignore the unit); for real a `None` unit "
                                                "is a D-Bus error: tests/system/test_crash.py revert points"),
    f"{D}steps.x_restart_from_file__mutmut_8": ("not killed over fakes (they ignore the unit); for real a drain of "
                                                "nothing: tests/system/test_drain_interrupt.py"),
    **{f"{D}steps.x_restart_from_file__mutmut_{n}": HOOK for n in (13, 15, 17, 45, 47, 49, 50, 51)},
    f"{D}steps.x_restart_from_file__mutmut_20": ("the profile name on the revert's gate target: only the gate's "
                                                 "messages name it (the URL, alias and timeouts are the unit's)"),
    f"{D}steps.x_restart_from_file__mutmut_25": WHERE,
    **{f"{D}steps.x__undo_write__mutmut_{n}": HOOK for n in (16, 21, 22, 24, 29)},
    **{f"{D}steps.x__undo_write__mutmut_{n}": ("a second put-back after the restart step's undo did it: it finds "
                                               "the file as it was and changes nothing (test_plans counts one "
                                               "reload)")
       for n in (1, 2)},
    f"{D}steps.x__undo_write__mutmut_4": ACTED, f"{D}steps.x__undo_write__mutmut_14": ACTED,
    f"{D}steps.x__put_back_slot_file__mutmut_29": ACTED, f"{D}steps.x__put_back_slot_file__mutmut_51": ACTED,
    **{f"{D}steps.x__put_back_slot_file__mutmut_{n}": ("equivalent: the unlink is reached only when the file "
                                                       "was just read, so it exists")
       for n in (31, 32)},
    **{f"{D}steps.x__put_back_slot_file__mutmut_{n}": ("the name of the fault-injection point (`revert-unit`) "
                                                       "that tests/system/test_crash.py kills at; over fakes no "
                                                       "fault is injected there") for n in (42, 45, 49, 50)},
    f"{D}steps.x__put_back_slot_file__mutmut_48": "equivalent: Python's codec names are case-insensitive",
    # history, unitfiles, intent, plan, slots
    f"{D}history.xǁHistoryǁlist__mutmut_1": "the default page size of `specd history` (50 or 51 rows)",
    f"{D}history.xǁHistoryǁevents__mutmut_1": "the default page size of `specd history` (50 or 51 rows)",
    f"{D}history.xǁHistoryǁadd__mutmut_20": ("equivalent: SQLite always gives an INSERT's row id (never 0), so the "
                                             "`or` fallback is never taken"),
    f"{D}plan.x_target_from_text__mutmut_1": ("the default stability wait of a target read from a unit text; every "
                                              "caller that gates passes the profile's own"),
    f"{D}plan.x_target_from_text__mutmut_6": WHERE,
    f"{D}slots.x_port_of__mutmut_12": WHERE,
}

# Functions no selected unit test runs ("no tests"): the side effects the project tests for real, in the system
# tier, which mutmut does not run per mutant. Each names the system tests that exercise it.
SYSTEM = "no unit test runs it; exercised for real by "
NOTES.update({
    f"{D}systemd.xǁPydbusSystemdǁ*": (SYSTEM + "every switch of the system tier, against a private `systemd --user` "
                                     "over a real D-Bus: tests/system/test_switch_real.py, test_crash.py, "
                                     "test_bluegreen.py, test_switch_failures.py"),
    f"{D}systemd.xǁSystemdClientǁ*": "the Protocol's `...` bodies: nothing runs them",
    f"{D}systemd.xǁUnitStateǁdescribe": (SYSTEM + "the switch failures' messages: "
                                          "tests/system/test_switch_failures.py"),
    f"{D}systemd.x_connect_systemd": SYSTEM + "every system test (the composition root's D-Bus connection)",
    f"{D}systemd.x__bus_error_text": SYSTEM + "tests/system/test_setup.py (doctor without a session bus)",
    f"{D}systemd.x__no_bus_hint": SYSTEM + "tests/system/test_setup.py (doctor without a session bus)",
    f"{D}systemd.x_systemd_is_pid1": SYSTEM + "tests/system/test_setup.py (doctor's checks of the box)",
    f"{D}health.x_*": (SYSTEM + "the health gate of every real switch: tests/system/test_switch_real.py, "
                      "test_switch_failures.py, test_gate_busy.py (real llama-server)"),
    f"{D}health.xǁ_Stepsǁ*": (SYSTEM + "the health gate of every real switch: tests/system/test_switch_real.py, "
                             "test_switch_failures.py, test_gate_busy.py (real llama-server)"),
    f"{D}preflight.x_run_preflight": SYSTEM + "tests/system/test_preflight.py (real llama-server --help, real GGUFs)",
    f"{D}preflight.x_vram_*": (SYSTEM + "tests/system/test_preflight.py; the estimate itself is specd.gpu's "
                               "(unit-tested)"),
    f"{D}preflight.x_hub_*": SYSTEM + "tests/system/test_preflight.py (a model from the Hub cache)",
    f"{D}preflight.x_model_source_note": SYSTEM + "tests/system/test_preflight.py",
    f"{D}preflight.x__model_info": SYSTEM + "tests/system/test_preflight.py",
    f"{D}preflight.x__unit_text": SYSTEM + "tests/system/test_preflight.py, test_render.py",
    f"{D}preflight.x_check_strict_modes": SYSTEM + "tests/system/test_preflight.py",
    f"{D}preflight.x_environment_settings": SYSTEM + "tests/system/test_preflight.py (LLAMA_ARG_* checked against "
                                                     "the real binary's --help)",
    f"{D}preflight.x_check_port": SYSTEM + "tests/system/test_preflight.py, test_switch_failures.py (a port held by "
                                           "another process)",
    f"{D}preflight.x_vllm_preflight": SYSTEM + "tests/system/test_engines.py (the CPU vLLM build)",
    f"{D}status.x_*": SYSTEM + "tests/system/test_cli.py (`specd status` on a real deployment), test_web.py",
    f"{D}status.xǁStatusReportǁ*": SYSTEM + "tests/system/test_cli.py (`specd status --json`), test_web.py",
    f"{D}companions.x_*": SYSTEM + "tests/system/test_routing.py (companion servers under the private systemd)",
    f"{D}history.x_split_numbers": SYSTEM + "tests/system/test_web.py (the status page's history)",
    f"{D}history.xǁGenerationǁas_dict": SYSTEM + "tests/system/test_web.py, test_cli.py (`specd history --json`)",
    f"{D}history.xǁHistoryǁin_memory": SYSTEM + "tests/system/test_fault_suite.py (rollback with the state DB gone)",
    f"{D}history.xǁHistoryǁprune": SYSTEM + "tests/system/test_daemon.py (the daemon's upkeep)",
    f"{D}seams.x_default_http": SYSTEM + "every system test over HTTP (the composition root's client factory)",
    f"{D}seams.xǁNoProxyǁserving": "a constant `False` for deployments without a daemon: nothing to mutate but it",
    f"{D}priority.xǁUnchangedPriorityǁlower": "the read-only seams' constant reason text",
})

# Killed by tests written after pass 2 began, each checked by hand against its mutation (benchmarks/results/
# mutation-deploy.md lists how).
WIRING = "tests/unit/test_switcher_wiring.py::"
NOTES.update({
    **{f"{D}switch.xǁSwitcherǁrecover__mutmut_{n}": (
        f"killed now (checked by hand): {WIRING}test_recovery_without_waiting_skips_a_busy_lock_and_a_missing_intent")
       for n in (2, 5, 7, 8, 9, 13)},
    **{f"{D}switch.xǁSwitcherǁrecover__mutmut_{n}": (
        f"killed now (checked by hand): {WIRING}test_recovery_waits_for_a_lock_that_is_let_go_within_the_wait")
       for n in (10, 11, 12)},
    f"{D}switch.xǁSwitcherǁrecover__mutmut_3": ("equivalent: with wait and no intent, recovery under the lock finds "
                                                "no intent either and returns None"),
    f"{D}switch.xǁSwitcherǁrecover__mutmut_6": "the lock holder's `what`, shown to a second caller: text",
    f"{D}switch.xǁSwitcherǁrecover__mutmut_14": ("a 1 s wait instead of none for a busy lock when told not to wait: "
                                                 "the daemon's recovery pass comes back later either way"),
})
NOTES.update({
    **{f"{D}lock.x__holder__mutmut_{n}": (
        f"killed now (checked by hand): {WIRING}test_a_command_that_meets_the_lock_names_what_holds_it")
       for n in (17, 18, 19, 23, 24, 25)},
    f"{D}lock.x__holder__mutmut_15": "equivalent: the holder record is far shorter than 4,096 bytes",
    f"{D}lock.x__holder__mutmut_16": ("the wording for an empty lock file (taken, its record not yet written: a "
                                      "moment's race): \"pid None (None, ...)\" or \"another specd process\""),
})
BY_HAND = "killed now (checked by hand): "
NOTES.update({
    **{f"{D}preflight.x_check_socket__mutmut_{n}": "the refusal's hint: text" for n in (5, 7)},
    f"{D}priority.x__set_nice__mutmut_3": ("a fourth pass for threads started meanwhile instead of three: the same "
                                           "values on a server whose thread pool is up"),
    f"{D}priority.x__set_nice__mutmut_8": ("a thread that ends between being listed and being changed: a race no "
                                           "test can time (ProcessLookupError would escape)"),
    f"{D}priority.x__threads__mutmut_6": ("a child that exits while its threads are listed: a race no test can time "
                                          "(NoSuchProcess would escape)"),
    **{f"{D}priority.x__threads__mutmut_{n}": ("a GAP left: direct children only; a server two levels below the "
                                               "unit's main process (a launcher that runs a shell that runs it) would "
                                               "keep its priority; no test starts one")
       for n in (4, 5)},
    **{f"{D}priority.xǁThreadNiceǁlower__mutmut_{n}": ROOT for n in (7, 8, 9, 10, 15, 16, 17, 18, 19, 20)},
    **{f"{D}priority.xǁThreadNiceǁlower__mutmut_{n}": (BY_HAND + "tests/unit/test_priority.py::test_every_thread_"
                                                       "loads_lowered_and_gets_its_priority_back (the parent is "
                                                       "left alone; the Lowered names the server)")
       for n in (33, 45)},
    **{f"{D}priority.xǁThreadNiceǁlower__mutmut_{n}": ("the undo when lowering fails half-way: setpriority fails "
                                                       "for a thread only when it vanished (suppressed) or without "
                                                       "privilege (refused before): not reachable in a test as root")
       for n in range(37, 45)},
    f"{D}rollback.x__before_steps__mutmut_3": "equivalent: `history.get(None)` is None, as the else branch gives",
    **{f"{D}rollback.x_rollback_target__mutmut_{n}": "the unit's name in the no-backup error: text" for n in (46, 65)},
    **{f"{D}rollback.x_rollback_target__mutmut_{n}": (BY_HAND + "tests/unit/test_rollback_target.py (a newer "
                                                      "backup that is the installed unit is passed over)")
       for n in (48, 67)},
    **{f"{D}rollback.x_rollback_target__mutmut_{n}": ("equivalent: for a switch `content_id` is the row itself, and "
                                                      "for a rollback the row it restored has the same unit text and "
                                                      "the same `content_id`")
       for n in (53, 54)},
    **{f"{D}rollback.x_walk_position__mutmut_{n}": "the loop guard's bound (10,000 or 10,001; < or <=)"
       for n in (3, 4)},
    f"{D}rollback.x_walk_position__mutmut_6": ("equivalent: only rollback rows have a `restores_id`, so the `or` "
                                               "admits no other row"),
    f"{D}unitfiles.x_write_backup__mutmut_9": BY_HAND + "tests/unit/test_ports_and_backups.py (a 0640 unit's backup)",
    f"{D}unitfiles.x_write_backup__mutmut_13": BY_HAND + "tests/unit/test_ports_and_backups.py (a 0640 unit's backup)",
    f"{D}unitfiles.x_prune_backups__mutmut_5": BY_HAND + "tests/unit/test_ports_and_backups.py (a protected backup "
                                                         "between two pruned ones)",
    **{f"{D}unitfiles.x_prune_backups__mutmut_{n}": "equivalent: the backups were just listed, so they exist"
       for n in (6, 7)},
    f"{D}unitfiles.x_disk_free__mutmut_2": ("equivalent where it is called: the parent of a file specd writes is "
                                            "on the same file system as the file"),
    f"{D}systemd.x_journal_tail__mutmut_1": "the default number of lines shown (15 or 16); every caller names its own",
    f"{D}systemd.x_journal_tail__mutmut_6": ("equivalent: every caller passes the output file; the default is for "
                                             "the CLI's fallback"),
    **{f"{D}systemd.x_journal_tail__mutmut_{n}": ("journalctl's time limit (10 s, 11 s or none): a journal that "
                                                  "hangs, which no test can make")
       for n in (58, 63, 67)},
    f"{D}systemd.x_journal_tail__mutmut_64": "equivalent: `check` defaults to False",
    f"{D}systemd.x_journal_tail__mutmut_68": ("check=True: a journalctl that exits non-zero would raise instead of "
                                              "showing what it printed; the FAKE journalctl exits 0"),
    **{f"{D}systemd.x_output_tail__mutmut_{n}": ("equivalent: the size read as 0 or +1 only moves where reading "
                                                 "starts; a file under 64 KiB is read whole either way, and a larger "
                                                 "one's first line in the window is cut anyway")
       for n in (7, 8, 9, 10)},
    f"{D}systemd.x_output_tail__mutmut_22": "equivalent: bytes.decode defaults to UTF-8",
    f"{D}slots.x_port_beside__mutmut_7": WHERE, f"{D}slots.x_with_port__mutmut_11": WHERE,
    f"{D}slots.x_with_port__mutmut_63": WHERE,
    f"{D}slots.x_with_port__mutmut_65": "the message of a guard marked `pragma: no cover` (a quoting bug): text",
    f"{D}slots.x_with_port__mutmut_48": ("equivalent: `rstrip()` also strips the newline, and a line ending in a "
                                         "backslash is caught either way"),
    f"{D}slots.x_port_beside__mutmut_16": ("a GAP left: the spare port when it differs from the serving one; the "
                                           "tests' spare port is always the serving one's + 1 or equal to it"),
})
PRIVATE = ("a GAP left: the file's 0600 mode (`mode=385` is 0o601, the same for reading); nothing the tests read "
           "depends on who else may read it; the unit's own mode is tested for backups (test_ports_and_backups)")
TIMES = ("killed now (checked by hand): test_bluegreen::test_history_records_how_long_each_part_of_a_switch_and_a_"
         "rollback_took (a restart that moves the seams' clock 2 s; _restart 5, _install 110, 111, 112 and 124, "
         "rollback 101 and 114, switch 101 applied; the others drop the same arguments to history.finish)")
NOTES.update({
    f"{D}capacity.x_text_fits__mutmut_7": WHERE,
    **{f"{D}capacity.x_threads_of__mutmut_{n}": "equivalent: -1 and -2 both mean llama-server's default"
       for n in (26, 29)},
    f"{D}capacity.x_threads_of__mutmut_8": "equivalent: `UnitCommand.option` reads the command line only",
    f"{D}capacity.x_fits_beside__mutmut_64": "equivalent: `settings=` overrides the context-size argument",
    **{f"{D}capacity.x_fits_beside__mutmut_{n}": ("a GAP left: what the GPU path passes on to `vram_check` (the "
                                                  "environment, the draft, PID 0); vram_check's own tests cover "
                                                  "what it counts (test_gpu*.py), not this call")
       for n in (30, 32, 39, 41)},
    f"{D}capacity.x_fits_beside__mutmut_53": ("a GAP left: a draft model held on the CPU by `-ngld 0` beside a "
                                              "target on the CPU; no test has a separate draft layer count"),
    **{f"{D}history.xǁHistoryǁ__init____mutmut_{n}": ("outcome-equivalent: an identity that never matches makes "
                                                      "every statement reopen the same file: slower, same rows")
       for n in (16, 17)},
    **{f"{D}history.xǁHistoryǁ_execute__mutmut_{n}": ("outcome-equivalent: an identity that never matches makes "
                                                      "every statement reopen the same file: slower, same rows")
       for n in (1, 17, 18)},
    **{f"{D}history.xǁHistoryǁ_execute__mutmut_{n}": "the state-database error's message and hint: text"
       for n in (23, 24, 25, 26)},
    **{f"{D}intent.x_save__mutmut_{n}": "the intent file's JSON indentation: the same record" for n in (8, 10, 12)},
    **{f"{D}intent.x_save__mutmut_{n}": PRIVATE for n in (3, 6, 13)},
    **{f"{D}slots.x_write_pointer__mutmut_{n}": PRIVATE for n in (12, 15, 18)},
    **{f"{D}unitfiles.xǁContentStoreǁput__mutmut_{n}": ("a GAP left: the content store's 0600 (its units may hold "
                                                         "an API key; `durable.private_mode` makes any text with a "
                                                         "key 0600 whatever the mode asked, which is why it lives)")
       for n in (8, 11, 15)},
    f"{D}slots.x_write_pointer__mutmut_7": ("the pointer's `unit` field is for a person reading the file: "
                                            "`read_pointer` reads `slot` only"),
    f"{D}slots.x_same_but_port__mutmut_2": ("equivalent: identical texts also compare equal after rewriting the "
                                            "port to the one they share"),
    **{f"{D}load.x_wait_until_idle__mutmut_{n}": ("the drain's default quiet time and poll interval (0.2 or 1.2 s; "
                                                  "0.1 or 1.1 s): how long the drain lasts, not what it decides")
       for n in (1, 2)},
    **{f"{D}load.x_wait_until_idle__mutmut_{n}": ("a GAP left: the drain's polls without the API key (see "
                                                  "bluegreen._drain_old__mutmut_16); the unit tests' fake servers "
                                                  "ask for no key")
       for n in (7, 10, 50, 53)},
    f"{D}load.x_wait_until_idle__mutmut_57": "the count at the start, shown in the switch's note: text",
    f"{D}load.x__metrics_page__mutmut_7": ("equivalent: a refused /metrics page (501, 404) has no gauges, so it "
                                           "counts as none either way"),
    f"{D}load.x__processing_slots__mutmut_8": ("equivalent: a refused /slots page's JSON is an error object, not a "
                                               "list, so it counts as unknown either way"),
    f"{D}seams.xǁSeamsǁlock__mutmut_10": "equivalent in production: the seams' clock is the system clock",
    f"{D}seams.xǁSeamsǁlock__mutmut_11": ("a GAP left: the lock file named after no unit would serialize every "
                                          "deployment's operations together; the tests have one deployment"),
    **{f"{D}switch.xǁSwitcherǁ__init____mutmut_{n}": ("composition: the Switcher's own capacity check (GPUs, "
                                                      "companions); unit tests pass theirs, tests/system/"
                                                      "test_routing.py runs the real one beside companions")
       for n in range(18, 24)},
    **{f"{D}switch.xǁSwitcherǁ_install__mutmut_{n}": TIMES for n in (109, 110, 111, 112, 116, 117, 118, 119, 124)},
    **{f"{D}switch.xǁSwitcherǁ_install__mutmut_{n}": HOOK for n in (126, 128)},
    f"{D}switch.xǁSwitcherǁ_install__mutmut_96": "the message of a guard marked `pragma: no cover`: text",
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": HOOK for n in (25, 27)},
    **{f"{D}switch.xǁSwitcherǁ{fn}__mutmut_{n}": "the lock holder's `what`, shown to a second caller: text"
       for fn, ns in (("switch", (3,)), ("rollback", (3, 4, 5, 8)), ("record_external_edit", (1,))) for n in ns},
    f"{D}switch.xǁSwitcherǁrecord_external_edit__mutmut_7": ("a 1 s wait instead of none for a busy lock: the "
                                                             "watcher records the edit on its next look either way"),
    **{f"{D}switch.xǁSwitcherǁrollback__mutmut_{n}": "the refusal's hint: text" for n in (47, 49)},
    **{f"{D}switch.xǁSwitcherǁrollback__mutmut_{n}": TIMES for n in (101, 114)},
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": ("a GAP left: the new server's API key on the gate's target; "
                                                    "over fakes the gate accepts any; tests/system/test_profile_"
                                                    "kinds.py switches to a profile with a key for real")
       for n in (64, 72, 73)},
    f"{D}switch.xǁSwitcherǁ_revert__mutmut_18": "the operation named in the revert's message: text",
    f"{D}switch.xǁSwitcherǁ_revert__mutmut_21": ("equivalent: a switch's or rollback's intent is written after its "
                                                 "history row, so it always carries the id (a shadow bench's "
                                                 "candidate is recovered apart); `or 0` only satisfies the type"),
    f"{D}switch.xǁSwitcherǁactive_profile__mutmut_3": "equivalent: `profile_of_unit(\"\")` is None too",
    f"{D}steps.x__undo_restart__mutmut_16": ACTED,
    f"{D}steps.x__undo_restart__mutmut_37": ("not killed over fakes (they ignore the unit); for real a drain of "
                                             "nothing: tests/system/test_drain_interrupt.py"),
    **{f"{D}steps.x__undo_restart__mutmut_{n}": ("outcome-equivalent: with the keys broken the undo stops the unit "
                                                 "instead of restarting it, and the settle step then brings a "
                                                 "stopped old server back (restart_settled): the old server serves "
                                                 "again either way, after a stop and a start")
       for n in (19, 20, 27, 29, 30)},
})
NOTES.update({
    f"{D}capacity.x_capacity_check__mutmut_5": (BY_HAND + "tests/unit/test_capacity.py::test_the_check_asks_for_the_"
                                                "companions_each_time_and_judges_a_unit_text"),
    **{f"{D}capacity.x_fits_beside__mutmut_{n}": (BY_HAND + "tests/unit/test_capacity.py::test_the_draft_model_and_"
                                                  "the_environments_settings_count_in_host_memory")
       for n in (14, 16)},
})
NOTES.update({
    **{f"{D}switch.xǁSwitcherǁ_record_edit_locked__mutmut_{n}": (
        BY_HAND + f"{WIRING}test_a_hand_edit_is_recorded_with_a_backup_of_what_specd_had_installed")
       for n in (13, 14, 16, 19, 20, 21, 33, 46)},
    f"{D}switch.xǁSwitcherǁ_record_edit_locked__mutmut_15": ("equivalent: with no active generation there is no "
                                                             "digest, and the store has no text under `None`"),
    f"{D}switch.xǁSwitcherǁ_record_edit_locked__mutmut_17": ("equivalent: History.add stores a falsy backup path as "
                                                             "NULL, so \"\" and None give the same row"),
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": (
        BY_HAND + f"{WIRING}test_switching_to_the_active_profile_changes_nothing_and_says_so (47 and 51 applied; 48, "
        "50 and 52 change what the same assertions read)")
       for n in (47, 48, 50, 51, 52)},
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": (
        BY_HAND + f"{WIRING}test_a_switch_is_gated_as_its_profile_says_and_reports_the_gates_result")
       for n in (60, 62, 63, 70, 71)},
    **{f"{D}switch.xǁSwitcherǁ_install__mutmut_{n}": (
        BY_HAND + f"{WIRING}test_a_switch_is_gated_as_its_profile_says_and_reports_the_gates_result")
       for n in (14, 139)},
    f"{D}switch.xǁSwitcherǁrollback__mutmut_9": (BY_HAND + "tests/unit/test_rollback_walk.py::test_a_hand_edit_"
                                                 "before_a_rollback_is_recorded_and_kept_in_a_backup"),
    f"{D}switch.xǁSwitcherǁrollback__mutmut_17": (BY_HAND + "tests/unit/test_rollback_walk.py::test_without_history_"
                                                  "a_backup_that_is_the_installed_unit_is_passed_over"),
    **{f"{D}switch.xǁSwitcherǁrollback__mutmut_{n}": ("equivalent for units specd rendered: the profile and the "
                                                      "`where` of a generation's text are read from its marker "
                                                      "instead of its row, which names the same profile")
       for n in (26, 30)},
    **{f"{D}switch.xǁSwitcherǁ{fn}__mutmut_{n}": WHERE for fn, n in (("switch", 97), ("switch", 98),
                                                                   ("_text_capacity", 10), ("_text_capacity", 11))},
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": ("not killed over fakes (their unit_state ignores the unit); for "
                                                    "real a `None` unit is a D-Bus error: every system-tier switch")
       for n in (10,)},
    f"{D}switch.xǁSwitcherǁswitch__mutmut_101": TIMES,
    **{f"{D}switch.xǁSwitcherǁ_install__mutmut_{n}": ("a GAP left: the refusal when the disk has no room for a backup; "
                                                      "tests/system/small_disk.py's rig fills a real small file "
                                                      "system for it")
       for n in range(21, 27)},
})
NOTES.update({
    **{f"{D}rollback.x_walk_position__mutmut_{n}": (BY_HAND + "tests/unit/test_rollback_target.py::test_a_rollback_"
                                                    "whose_previous_row_was_pruned_stands_for_what_it_restored")
       for n in (15, 30, 31, 32)},
})
CAPACITY_INPUTS = ("killed now (checked by hand): test_bluegreen::test_the_capacity_check_weighs_the_new_unit_beside_"
                   "the_running_one (_text_capacity 1, 2, 5, rollback 94, 95, switch 88, 92 applied; 89 drops the same "
                   "argument as 88; 6 and 93 would parse a missing unit, but `choose` asks only beside a running one)")
NOTES.update({
    **{f"{D}bluegreen.x_choose__mutmut_{n}": WHERE for n in (72, 77, 86, 87, 100)},
    **{f"{D}bluegreen.x_choose__mutmut_{n}": ("a GAP left: the refusal when the new server's port cannot be chosen "
                                              "(a unit specd did not render); no unit test has such a unit")
       for n in range(101, 107)},
    f"{D}bluegreen.x_choose__mutmut_91": ("equivalent for units specd rendered: rewriting a port to the one it has "
                                          "gives the same text"),
    f"{D}bluegreen.x_choose__mutmut_60": ("not killed over fakes (the fake proxy link ignores the unit); for real "
                                          "the daemon's control socket answers for its unit: tests/system/"
                                          "test_bluegreen.py"),
    **{f"{D}bluegreen.x_stop_stray_free_slot__mutmut_{n}": ("not killed over fakes (they ignore the unit); for "
                                                            "real a `None` unit is a D-Bus error")
       for n in (19, 20)},
    f"{D}steps.x__backup__mutmut_5": "equivalent: the backup has a name exactly when there is a current unit",
    f"{D}steps.x__backup__mutmut_13": "equivalent: with `target=` given, the profile only names a default target",
    **{f"{D}steps.x__gate__mutmut_{n}": ("a GAP left: the API key on the gate's probes; over fakes the gate "
                                         "accepts any; tests/system/test_profile_kinds.py gates a profile with a "
                                         "key for real")
       for n in (8, 14)},
    f"{D}steps.x__reload__mutmut_2": "not killed over fakes (they ignore the unit); for real a D-Bus error",
    f"{D}steps.x__restart__mutmut_5": TIMES,
    f"{D}steps.x__save_server__mutmut_3": ("equivalent: without a current unit systemd reports the unit inactive, "
                                           "which is what None stands for"),
    f"{D}steps.x__save_server__mutmut_12": ("a stopped server's saved PID 1 instead of 0: no llama-server has PID "
                                            "1 (init), so the comparisons answer the same"),
    **{f"{D}steps.x__write__mutmut_{n}": (BY_HAND + f"{WIRING}test_a_profiles_key_file_is_written_private_before_"
                                          "its_unit (2, 3, 4 and 7 applied; 5, 6 and 8 fail the same write)")
       for n in (2, 3, 4, 5, 6, 7, 8)},
    f"{D}steps.x__write__mutmut_11": PRIVATE,
    **{f"{D}steps.x__write__mutmut_{n}": ("the name of the fault-injection point (`unit`) that the fault tests "
                                          "kill at; over fakes no fault is injected there")
       for n in (14, 17)},
    f"{D}switch.xǁSwitcherǁ_recover_locked__mutmut_21": "whether a stray server's stop is logged: the journal's text",
    **{f"{D}switch.xǁSwitcherǁ_recover_locked__mutmut_{n}": "which lines of the recovery message the event keeps"
       for n in (50, 51)},
    **{f"{D}switch.xǁSwitcherǁ_text_capacity__mutmut_{n}": CAPACITY_INPUTS for n in (1, 2, 5, 6)},
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": CAPACITY_INPUTS for n in (88, 89, 92, 93)},
    **{f"{D}switch.xǁSwitcherǁrollback__mutmut_{n}": CAPACITY_INPUTS for n in (94, 95)},
})
NOTES.update({
    f"{D}switch.xǁSwitcherǁ_record_edit_locked__mutmut_24": (
        BY_HAND + f"{WIRING}test_a_hand_edit_is_recorded_with_a_backup_of_what_specd_had_installed (its name)"),
    f"{D}slots.x_read_pointer__mutmut_6": "equivalent: the pointer is ASCII JSON, read alike in any locale",
    f"{D}transaction.xǁTransactionǁ__init____mutmut_2": "the message of a programming-error guard: text",
})
# The eleventh session's review of the last 42 "to review" rows: a test for each that a user meets, checked by
# hand against its mutation (/tmp/mcheck.py: applied, the named file run, restored), or why it is harmless.
BG, PL, WALK = "test_bluegreen::", "test_plans::", "test_rollback_walk::"
LOADED = (" (the FAKE systemd now runs what it loaded at its last daemon-reload, and every revert test asserts the "
          "one server left runs the text in its unit file)")
NOTES.update({
    f"{D}bluegreen.x_choose__mutmut_21": (
        "defence in depth: an old server on a Unix socket is caught again by `port_of`, whose error names the "
        "socket, so auto still restarts in place and says why (checked by hand with "
        f"{BG}test_auto_restarts_in_place_when_the_old_server_listens_on_a_unix_socket: the reason reads "
        "\"port cannot be chosen (... Unix socket /run/tiny.sock ...)\")"),
    f"{D}bluegreen.x_choose__mutmut_38": BY_HAND + f"{BG}test_a_forced_blue_green_without_a_proxy_section_is_refused",
    **{f"{D}bluegreen.x_choose__mutmut_{n}": (
        BY_HAND + f"{BG}test_with_no_server_running_a_switch_restarts_in_place_and_says_why (48, 51, 52 and 54 "
        "applied; 53 raises TypeError the same way 51 fails)") for n in (48, 51, 52, 53, 54)},
    f"{D}bluegreen.x_choose__mutmut_61": ("equivalent: the line runs only when the request is `auto` (the `if` "
                                          "above it), and `_refuse_or_restart` refuses only `blue-green`"),
    f"{D}candidate.x_recover_candidate__mutmut_8": ("equivalent: the shadow plan's revert (stop-new, write, "
                                                    "reload) never gates"),
    f"{D}switch.xǁSwitcherǁ_recover_locked__mutmut_5": ("equivalent: the shadow plan's revert (stop-new, write, "
                                                         "reload) never gates"),
    f"{D}switch.xǁSwitcherǁ_recover_locked__mutmut_9": (
        "equivalent outside tests: a Switcher's fault hook is `checkpoint` unless a test passes another, and "
        "`checkpoint` is recover_candidate's default"),
    f"{D}candidate.x_start_candidate__mutmut_24": (
        "equivalent in reachable states: the shadow bench refuses to start without a live server's unit file "
        "(specd.tune.shadow `_live`: \"no live server runs\"), so `live` is never None here"),
    **{f"{D}intent.x_clear__mutmut_{n}": (
        BY_HAND + f"{PL}test_a_candidate_already_undone_by_a_switch_s_recovery_stops_quietly (2 applied; 1 passes "
        "None, which pathlib takes as false, the same)") for n in (1, 2)},
    f"{D}load.x_wait_until_idle__mutmut_19": (
        BY_HAND + "test_load::test_a_server_busy_at_the_start_is_quiet_only_from_the_poll_that_finds_it_idle"),
    **{f"{D}plan.x_target_from_text__mutmut_{n}": (
        BY_HAND + f"{WALK}test_a_rollback_whose_profile_file_is_gone_is_gated_with_the_defaults") for n in (7, 8)},
    f"{D}rollback.x_walk_position__mutmut_18": (
        "not killed, and no history found where it matters: stopping the chain at its newest rollback leaves the "
        "one before it to the fallback (`history.get(rollback.content_id)`, the generation it restored), which "
        f"gave the same walk in every sequence tried ({WALK}test_toggling_between_two_profiles_walks_back_through_"
        "each_toggle, a,b,a,b,c walked back four times; the docstring's A,B,rollback,C sequence walked three)"),
    f"{D}rollback.x_walk_position__mutmut_27": (
        "equivalent: for a switch or a hand edit `content_id` is the generation itself, and a rollback that names "
        "what it restored always names its previous row (a restorable generation means an active one), so the "
        "branch is reached only by rows whose restored generation was pruned with it"),
    **{f"{D}rollback.x_walk_position__mutmut_{n}": (
        BY_HAND + f"{WALK}test_a_rollback_to_an_older_generation_walks_on_from_that_generation_not_from_the_one_"
        "before_it") for n in (39, 43, 44, 45)},
    f"{D}slots.x_slot_of_unit__mutmut_3": BY_HAND + "test_ports_and_backups::test_each_slot_is_found_by_its_unit_"
       "and_a_foreign_unit_by_none",
       f"{D}slots.x_slots_of__mutmut_8": BY_HAND + "test_ports_and_backups::test_each_slot_is_found_by_its_unit_"
       "and_a_foreign_unit_by_none",
    **{f"{D}steps.x__undo_write__mutmut_{n}": (BY_HAND + f"{PL}test_every_revert_point_killed_is_finished_by_the_"
                                               "next_recovery" + LOADED) for n in (8, 13)},
    f"{D}steps.x__undo_write__mutmut_9": (
        "equivalent: it differs only when the write step had not been recorded done, and then the reload step after "
        "it had not run either: systemd still had the old text loaded, so the skipped reload changed nothing" + LOADED),
    f"{D}steps.x__put_back_slot_file__mutmut_21": (
        "the early return only spares rewriting a file that already holds its old text (or unlinking one already "
        "gone) and one daemon-reload: the unit ends the same"),
    f"{D}steps.x__put_back_slot_file__mutmut_36": (
        "equivalent: the file's own text is returned early when it is already the old one (the `if` above), so "
        "`previous_text` never finds the old text in `installed` from here"),
    **{f"{D}switch.xǁSwitcherǁ_install__mutmut_{n}": (
        BY_HAND + f"{BG}test_the_first_install_names_no_backup_and_a_later_one_names_the_backup_it_wrote")
       for n in (12, 34)},
    f"{D}switch.xǁSwitcherǁ_install__mutmut_73": (
        "on a first install only (no old unit): the intent's backup_path reads \"None\" instead of null; that "
        "revert removes the file (nothing was there before) and never reads the backup"),
    f"{D}switch.xǁSwitcherǁ_install__mutmut_54": (
        "the intent's `unit` field is for a person reading the record: its path is keyed by the unit already and "
        "no code reads the field back"),
    **{f"{D}switch.xǁSwitcherǁ_install__mutmut_{n}": (
        BY_HAND + f"{BG}test_a_failed_switch_and_a_pending_one_say_what_was_being_installed") for n in (55, 57)},
    f"{D}switch.xǁSwitcherǁ_record_edit_locked__mutmut_18": (
        BY_HAND + f"{PL}test_a_hand_edit_is_recorded_even_when_the_unit_store_lost_the_text_it_replaced"),
    f"{D}switch.xǁSwitcherǁrollback__mutmut_79": ("equivalent: `choose` plans a restart whenever there is no current "
                                                  "unit, whatever `running` says"),
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": (
        "equivalent but for a unit whose file was deleted while it runs: systemd reports a unit without a file as "
        "not found, MainPID 0 and not running, the values None stands for (and for that one case the mutant's "
        "answer, the running server's PID, is no worse)") for n in (9, 32)},
})
NOTES.update({
    f"{D}transaction.xǁRunǁreload_once": (
        "equivalent, and the function is gone since: `reload_once` had one caller, `_undo_write`, which "
        "`run.undone` already runs once per revert, so its flag never stopped a second reload; the undo now "
        "reloads directly (test_plans::test_a_revert_reloads_systemd_once_after_the_file_is_back_and_before_the_"
        "restart)"),
})
NOTES.update({
    **{f"{D}load.x_wait_until_idle__mutmut_{n}": (
        BY_HAND + "test_load::test_every_poll_of_a_wait_carries_the_api_key (7 and 50 applied; 10 and 53 drop the "
        "same argument)") for n in (7, 10, 50, 53)},
    **{f"{D}steps.x__gate__mutmut_{n}": (
        BY_HAND + "test_bluegreen::test_a_profile_with_an_api_key_is_gated_with_it (8 applied; 14 drops the same "
        "argument)") for n in (8, 14)},
    **{f"{D}switch.xǁSwitcherǁswitch__mutmut_{n}": (
        BY_HAND + "test_bluegreen::test_a_profile_with_an_api_key_is_gated_with_it (64 applied; 72 drops the same "
        "argument)") for n in (64, 72)},
    f"{D}switch.xǁSwitcherǁswitch__mutmut_73": (
        "a GAP left: the key file's content the real preflight renders (`pre.secrets`), written 0600 before the unit; "
        "the unit tests' preflight is a fake that renders none; tests/system/test_profile_kinds.py switches to a "
        "profile with a key for real"),
})
MODES = ("killed now (checked by hand): test_bluegreen::test_the_switch_s_state_files_are_readable_by_their_owner_only "
         "(None and 385 applied; the omitted argument is None)")
NOTES.update({
    **{f"{D}slots.x_write_pointer__mutmut_{n}": MODES for n in (12, 15, 18)},
    **{f"{D}unitfiles.xǁContentStoreǁput__mutmut_{n}": MODES for n in (8, 11, 15)},
    **{f"{D}intent.x_save__mutmut_{n}": (
        "a GAP left: test_bluegreen::test_the_switch_s_state_files_are_readable_by_their_owner_only checks the "
        "intent file's 0600 and passes with these mutants too (the file it finds is 0600 either way); why was not "
        "found this session") for n in (3, 6, 13)},
})
# The twelfth session: the GAP rows closed by tests (each checked by hand: the mutation applied to the file,
# the named test file run, restored).
GUARDS, CAP, PRIO = "test_switch_guards::", "test_capacity::", "test_priority::"
NOTES.update({
    **{f"{D}intent.x_save__mutmut_{n}": (
        BY_HAND + f"{BG}test_the_switch_s_state_files_are_readable_by_their_owner_only, once it compared the files "
        "by path: the intent and the slot pointer share the name llama-test.service.json, so the pointer's mode "
        "had stood for the intent's (3 and 13 applied; 6 omits the argument, the same as None)") for n in (3, 6, 13)},
    f"{D}steps.x__write__mutmut_11": (
        BY_HAND + f"{GUARDS}test_a_profiles_api_key_is_written_to_its_own_file_readable_by_its_owner_only (the "
        "world's preflight renders the key file as the real one does, `secret_files`)"),
    f"{D}switch.xǁSwitcherǁswitch__mutmut_73": (
        BY_HAND + f"{GUARDS}test_a_profiles_api_key_is_written_to_its_own_file_readable_by_its_owner_only"),
    **{f"{D}bluegreen.x__drain_old__mutmut_{n}": (
        BY_HAND + f"{GUARDS}test_the_old_server_is_drained_with_its_api_key (the fake old server answers 401 "
        "without the key, as llama-server does)") for n in (16, 22)},
    **{f"{D}bluegreen.x_choose__mutmut_{n}": (
        BY_HAND + f"{GUARDS}test_a_rollback_to_a_unit_specd_did_not_render_cannot_start_beside_on_the_same_port")
       for n in range(101, 107)},
    **{f"{D}switch.xǁSwitcherǁ_install__mutmut_{n}": (
        BY_HAND + f"{GUARDS}test_a_switch_needs_room_for_the_backup_and_the_new_unit_on_the_units_disk (one byte "
        "below the room asked for, and exactly it)") for n in range(21, 27)},
    **{f"{D}steps.x__start__mutmut_{n}": (
        BY_HAND + f"{GUARDS}test_a_server_systemd_names_no_main_pid_for_is_not_lowered (PID 0 names the caller "
        "to setpriority(2))") for n in (7, 10)},
    f"{D}steps.x__start__mutmut_11": (
        "harmless: it differs only for MainPID 1, which no service has (PID 1 is the manager of its PID "
        "namespace; a unit's processes are its descendants)"),
    f"{D}seams.xǁSeamsǁlock__mutmut_11": BY_HAND + f"{GUARDS}test_each_deployment_has_its_own_lock",
    f"{D}slots.x_port_beside__mutmut_16": (
        BY_HAND + "test_ports_and_backups::test_a_second_server_takes_its_own_port_unless_the_serving_one_holds_it "
        "(a [proxy] spare_port the user set)"),
    **{f"{D}capacity.x_fits_beside__mutmut_{n}": (
        BY_HAND + f"{CAP}test_on_a_gpu_the_new_servers_environment_and_draft_count_in_its_vram") for n in (30, 32)},
    f"{D}capacity.x_fits_beside__mutmut_41": (
        BY_HAND + f"{CAP}test_beside_the_running_server_its_vram_is_not_counted_as_freed"),
    f"{D}capacity.x_fits_beside__mutmut_39": (
        "equivalent: `vram_check`'s `current_main_pid` defaults to 0, the value the call passes (beside the running "
        "server nothing is freed; test_capacity::test_beside_the_running_server_its_vram_is_not_counted_as_freed "
        "checks that meaning)"),
    f"{D}capacity.x_fits_beside__mutmut_53": (
        BY_HAND + f"{CAP}test_on_the_cpu_a_draft_held_on_the_cpu_by_ngld_0_counts_in_host_memory"),
    **{f"{D}priority.x__threads__mutmut_{n}": (
        BY_HAND + f"{PRIO}test_a_server_two_launchers_below_the_units_main_process_is_lowered_too (False applied; "
        "None is falsy the same way)") for n in (4, 5)},
    f"{D}rollback.x_walk_position__mutmut_18": (
        BY_HAND + f"{WALK}test_after_two_rollbacks_and_a_switch_the_walk_goes_back_through_every_state_in_order "
        "(a, b, c, rollback, rollback, d: the mutant's third rollback from d went to a instead of c)"),
})

"""End-to-end: llmc's command line on bad input and bad flags.

Bad input (unreadable or malformed model/artifact, impossible output path)
must exit 1 with an "llmc: error:" line naming the file, and leave no output
file behind (a pre-existing output must stay untouched). Bad flags exit 2.
--help exits 0 and lists the subcommands/options.
"""
import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402
import make_hf_models  # noqa: E402

checks = None
work = None


def leftovers(folder, stem):
    """Files in folder whose name starts with stem (partial/temporary outputs)."""
    return sorted(n for n in os.listdir(folder) if n.startswith(stem))


def expect_error(name, args, names, out=None, code=1, must_contain=()):
    """Runs llmc; checks the exit code, that an 'llmc: error:' line mentions
    one of `names` and every string in must_contain (case-insensitive), and
    that `out` (if given) was not created and no temporary is left."""
    p = harness.run_llmc(args, check=False, timeout=120)
    err_lines = [l for l in p.stderr.splitlines() if l.startswith("llmc: error:")]
    line = err_lines[0] if err_lines else ""
    problems = []
    if p.returncode != code:
        problems.append(f"exit {p.returncode}, expected {code}")
    if code == 1:
        if not line:
            problems.append("no 'llmc: error:' line on stderr")
        elif names and not any(n in line for n in names):
            problems.append(f"error line does not name {names[0]}")
        for s in must_contain:  # a string, or a tuple of acceptable alternatives
            alts = s if isinstance(s, tuple) else (s,)
            if not any(a.lower() in line.lower() for a in alts):
                problems.append(f"error line does not mention '{' or '.join(alts)}'")
    if "Segmentation" in p.stderr or p.returncode < 0:
        problems.append(f"crashed (signal {-p.returncode})")
    if out is not None:
        if os.path.exists(out):
            problems.append(f"output {out} was created")
        left = leftovers(os.path.dirname(out), os.path.basename(out))
        if left:
            problems.append(f"left behind {left}")
    shown = line or (p.stderr.strip().splitlines() or [""])[-1]
    checks.check(not problems, name, "; ".join(problems) if problems else f"exit {p.returncode}: {shown[:160]}")
    return p


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def patched_copy(src, dst, offset, new_bytes):
    data = bytearray(open(src, "rb").read())
    data[offset : offset + len(new_bytes)] = new_bytes
    return write_bytes(dst, bytes(data))


def main():
    global checks, work
    work = harness.work_dir("cli_errors")
    checks = harness.Checks("llmc command line: errors, exit codes, help")
    rng_bytes = bytes((i * 2654435761 >> 13) & 0xFF for i in range(8192))

    # A small valid model and artifact to mutate.
    stories = os.path.join(harness.shared_dir(), "models", "stories260K.bin")
    if os.path.exists(stories):
        good_model = stories
    else:
        harness.skip_part(f"{stories} not found: the llama2.c checks skipped, a generated model stands in")
        cfg = make_hf_models.make_config("llama", "f32")
        good_model = os.path.join(work, "tiny-llama")
        make_hf_models.write_model(good_model, cfg, make_hf_models.make_weights(cfg, 7))
    good_art = os.path.join(work, "good.llmc")
    harness.run_llmc(["compile", good_model, "-o", good_art, "-q"])
    ok = harness.run_llmc(["run", good_art, "--prompt-tokens", "1,2,3", "-n", "2", "--print-ids", "-q"],
                          check=False)
    checks.check(ok.returncode == 0, "baseline: the valid artifact runs", f"exit {ok.returncode}")

    out = os.path.join(work, "out.llmc")
    run_args = ["--prompt-tokens", "1,2,3", "-n", "1", "-q"]

    # --- missing / garbage inputs --------------------------------------
    missing = os.path.join(work, "no-such-model.gguf")
    expect_error("run: nonexistent path", ["run", missing, *run_args], [missing])
    expect_error("compile: nonexistent path", ["compile", missing, "-o", out], [missing], out=out)
    for ext in ("gguf", "bin", "llmc", "safetensors"):
        junk = write_bytes(os.path.join(work, f"random.{ext}"), rng_bytes)
        # a *.safetensors path stands for its Hugging Face folder, which the
        # error may name instead
        names = [junk, os.path.dirname(junk)] if ext == "safetensors" else [junk]
        expect_error(f"compile: random bytes (.{ext})", ["compile", junk, "-o", out], names, out=out)
    empty = write_bytes(os.path.join(work, "empty.gguf"), b"")
    expect_error("run: empty file", ["run", empty, *run_args], [empty])

    # --- truncated GGUF -------------------------------------------------
    smol = os.path.join(harness.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    trunc = os.path.join(work, "truncated.gguf")
    if os.path.exists(smol):
        with open(smol, "rb") as f:
            write_bytes(trunc, f.read(1 << 20))
        expect_error("compile: truncated GGUF (first 1 MiB of SmolLM2)", ["compile", trunc, "-o", out], [trunc],
                     out=out)
        # header and metadata intact, the tensor data cut short by 4 MiB
        cut = os.path.join(work, "cut-data.gguf")
        with open(smol, "rb") as f, open(cut, "wb") as g:
            g.write(f.read(os.path.getsize(smol) - (4 << 20)))
        expect_error("compile: GGUF with its tensor data cut short", ["compile", cut, "-o", out], [cut], out=out)
    else:
        harness.skip_part(f"{smol} not found (run scripts/setup.sh): the truncated-GGUF checks skipped")
        # a truncated llama2.c checkpoint stands in
        with open(stories if os.path.exists(stories) else good_art, "rb") as f:
            write_bytes(trunc, f.read(4096))
        expect_error("compile: truncated model", ["compile", trunc, "-o", out], [trunc], out=out)

    # --- llama2.c checkpoint cut short ----------------------------------
    if os.path.exists(stories):
        cut_bin = os.path.join(work, "cut.bin")
        with open(stories, "rb") as f:
            write_bytes(cut_bin, f.read(os.path.getsize(stories) // 2))
        expect_error("compile: truncated llama2.c checkpoint", ["compile", cut_bin, "-o", out], [cut_bin], out=out)

    # --- HF folders -----------------------------------------------------
    cfg = make_hf_models.make_config("llama", "f32")
    neox = os.path.join(work, "hf-gptneox")
    make_hf_models.write_model(neox, dict(cfg, architectures=["GPTNeoXForCausalLM"], model_type="gpt_neox"),
                               make_hf_models.make_weights(cfg, 3))
    expect_error("compile: HF folder with unknown architecture", ["compile", neox, "-o", out], [neox], out=out,
                 must_contain=("GPTNeoXForCausalLM",))
    noweights = os.path.join(work, "hf-noweights")
    make_hf_models.write_model(noweights, cfg, make_hf_models.make_weights(cfg, 3))
    os.remove(os.path.join(noweights, "model.safetensors"))
    expect_error("compile: HF folder without safetensors", ["compile", noweights, "-o", out], [noweights], out=out)
    missing_t = os.path.join(work, "hf-missing-tensor")
    w = make_hf_models.make_weights(cfg, 3)
    del w["model.layers.1.mlp.up_proj.weight"]
    make_hf_models.write_model(missing_t, cfg, w)
    expect_error("compile: HF folder missing a tensor", ["compile", missing_t, "-o", out], [missing_t], out=out,
                 must_contain=(("model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight"),))
    badjson = os.path.join(work, "hf-badjson")
    make_hf_models.write_model(badjson, cfg, make_hf_models.make_weights(cfg, 3))
    write_bytes(os.path.join(badjson, "config.json"), b'{"architectures": ["LlamaForCausalLM"], ')
    expect_error("compile: HF folder with malformed config.json", ["compile", badjson, "-o", out], [badjson],
                 out=out)

    # --- damaged artifacts ----------------------------------------------
    data = open(good_art, "rb").read()
    magic, version = data[:8], struct.unpack_from("<I", data, 8)[0]
    data_off, data_size = struct.unpack_from("<QQ", data, 32)
    checks.check(magic == b"LLMCART\0", "artifact magic", repr(magic))
    flip_at = data_off + data_size // 2
    corrupt = patched_copy(good_art, os.path.join(work, "corrupt.llmc"), flip_at, bytes([data[flip_at] ^ 0x5A]))
    # Weights are data: a run hashes them only under --verify-weights (and
    # `llmc verify` always does); without it the run must not crash.
    expect_error("run --verify-weights: artifact with a flipped data byte",
                 ["run", corrupt, *run_args, "--verify-weights"], [corrupt], must_contain=("checksum",))
    expect_error("verify: artifact with a flipped data byte", ["verify", corrupt], [corrupt],
                 must_contain=("checksum",))
    p = harness.run_llmc(["run", corrupt, *run_args], check=False, timeout=120)
    checks.check(p.returncode == 0, "run without --verify-weights: a flipped weight byte is data",
                 f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
    bad_magic = patched_copy(good_art, os.path.join(work, "badmagic.llmc"), 0, b"LLMCXXX\0")
    expect_error("run: artifact with wrong magic", ["run", bad_magic, *run_args], [bad_magic])
    expect_error("inspect: artifact with wrong magic", ["inspect", bad_magic], [bad_magic])
    bad_ver = patched_copy(good_art, os.path.join(work, "badversion.llmc"), 8, struct.pack("<I", version + 98))
    expect_error("run: artifact with unknown format version", ["run", bad_ver, *run_args], [bad_ver],
                 must_contain=("version",))
    expect_error("inspect: artifact with unknown format version", ["inspect", bad_ver], [bad_ver],
                 must_contain=("version",))
    short_art = write_bytes(os.path.join(work, "short.llmc"), data[: max(64, len(data) // 3)])
    expect_error("run: truncated artifact", ["run", short_art, *run_args], [short_art])
    manifest_off = struct.unpack_from("<Q", data, 16)[0]
    bad_manifest = patched_copy(good_art, os.path.join(work, "badmanifest.llmc"), manifest_off + 3,
                                bytes([data[manifest_off + 3] ^ 0x20]))
    expect_error("run: artifact with a corrupted manifest", ["run", bad_manifest, *run_args], [bad_manifest],
                 must_contain=("checksum",))

    # --- bad run inputs ---------------------------------------------------
    expect_error("run: token id outside the vocabulary",
                 ["run", good_art, "--prompt-tokens", "1,999999", "-n", "1", "-q"], [], must_contain=("999999",))
    expect_error("run: non-integer token id", ["run", good_art, "--prompt-tokens", "1,x", "-n", "1", "-q"], [],
                 must_contain=("x",))
    # --samples N: continuation i is the one a run with --seed S + i draws
    # (test_speculative_sampling counts on it), plain and with drafts.
    sampled = ["--prompt-tokens", "1,2,3", "-n", "5", "--print-ids", "-q", "--temp", "1",
               "--ignore-eos", "-t", "1"]
    for spec in ([], ["--speculate", "ngram"]):
        alone = [harness.run_llmc(["run", good_art, *sampled, *spec, "--seed", str(40 + i)],
                                  check=False).stdout.strip() for i in range(3)]
        together = harness.run_llmc(["run", good_art, *sampled, *spec, "--seed", "40",
                                     "--samples", "3"], check=False).stdout.split("\n")[:3]
        checks.check(all(alone) and together == alone and len(set(alone)) > 1,
                     f"run --samples 3 {' '.join(spec)}: the runs of seeds 40, 41, 42, in order",
                     f"{together} vs {alone}")
    expect_error("run: --samples 0", ["run", good_art, *run_args, "--samples", "0"], [], code=2)
    expect_error("run: --samples with --dump-logits",
                 ["run", good_art, *run_args, "--samples", "2", "--dump-logits",
                  os.path.join(work, "samples.npy")], [], code=2)
    nodir_npy = os.path.join(work, "no-such-dir", "logits.npy")
    expect_error("run: --dump-logits into a missing folder",
                 ["run", good_art, *run_args, "--dump-logits", nodir_npy], [nodir_npy], out=None)

    # --- compile outputs --------------------------------------------------
    nodir_out = os.path.join(work, "no-such-dir", "out.llmc")
    expect_error("compile: output folder does not exist", ["compile", good_model, "-o", nodir_out], [nodir_out])
    checks.check(not os.path.exists(os.path.dirname(nodir_out)), "compile: did not create the missing folder")
    keep = os.path.join(work, "keep.llmc")
    write_bytes(keep, b"previous contents")
    expect_error("compile: failing compile onto an existing output", ["compile", neox, "-o", keep], [neox])
    checks.check(open(keep, "rb").read() == b"previous contents", "compile: failed compile left the old output untouched")
    checks.check(leftovers(work, "keep.llmc") == ["keep.llmc"], "compile: no temporary left next to the output",
                 str(leftovers(work, "keep.llmc")))

    # Interrupt a compile (SIGTERM) while it runs: OUT must not appear.
    big = smol if os.path.exists(smol) else good_model
    killed_out = os.path.join(work, "killed.llmc")
    proc = subprocess.Popen([harness.llmc_bin(), "compile", big, "-o", killed_out, "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.3)
    finished_early = proc.poll() is not None
    if not finished_early:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    if finished_early:
        checks.check(os.path.isfile(killed_out), "compile: interrupted compile",
                     "finished before the interrupt (nothing to check); output complete")
    else:
        left = leftovers(work, "killed.llmc")
        checks.check(not os.path.exists(killed_out) and not left,
                     "compile: interrupted compile leaves no output and no temporary",
                     "SIGTERM after 0.3 s; " + (f"temporary files remain: {left}" if left else "nothing left"))

    # --- bad flags: exit 2 -------------------------------------------------
    expect_error("flags: --top-p 2", ["run", good_art, "--top-p", "2", *run_args], [], code=2)
    expect_error("flags: unknown option", ["run", good_art, "--no-such-option", *run_args], [], code=2)
    expect_error("flags: unknown subcommand", ["frobnicate"], [], code=2)
    expect_error("flags: no subcommand", [], [], code=2)
    expect_error("flags: compile without -o", ["compile", good_model], [], code=2)
    expect_error("flags: negative -n", ["run", good_art, "--prompt-tokens", "1", "-n", "-3"], [], code=2)

    # --- help ----------------------------------------------------------------
    h = harness.run_llmc(["--help"], check=False)
    missing_words = [w for w in ("compile", "inspect", "run") if w not in h.stdout]
    checks.check(h.returncode == 0 and not missing_words, "llmc --help",
                 f"exit {h.returncode}" + (f", does not mention {missing_words}" if missing_words else ""))
    h = harness.run_llmc(["run", "--help"], check=False)
    missing_words = [w for w in ("--prompt-tokens", "--dump-logits", "--temp", "--top-p", "--print-ids")
                     if w not in h.stdout]
    checks.check(h.returncode == 0 and not missing_words, "llmc run --help",
                 f"exit {h.returncode}" + (f", does not mention {missing_words}" if missing_words else ""))
    h = harness.run_llmc(["compile", "--help"], check=False)
    checks.check(h.returncode == 0 and "--output" in h.stdout, "llmc compile --help", f"exit {h.returncode}")
    checks.finish()


if __name__ == "__main__":
    main()

"""Checker for lab 09: run it with ``pytest labs/lab09_envelope``.

No ranks: a header is a tensor, and everything that matters about it can be checked in this
process, cheapest first:

1. round trips: ``unpack(pack(h)) == h`` for V1 and V2 headers, every kind, 1- to 8-D shapes
   (the 5-D latent among them), request ids past 2**32; then 30 headers drawn at each run,
   which no list holds (hidden cases);
2. the peer's view: ppdit's own ``protocol.decode`` (a V1 reader) must read your V1 headers'
   request, chunk and kind and refuse your V2 headers, and every slot must hold what
   ``protocol.encode`` writes there, or what the lab's layout table says for the slots
   ppdit leaves spare (a round trip through your own code proves nothing about a peer);
3. refusals at the edges: ``pack`` refuses what the layout cannot hold, ``unpack`` refuses
   what is not a chunk header;
4. compatibility: a V1 header unpacks to ``DEFAULT_GENERATION`` whatever its reserved slot
   holds, and a V2 receiver accepts it;
5. ``check``: every rule refuses with a ValueError naming the rule and both values, and
   nothing valid is refused.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import torch

HERE = Path(__file__).parent
LATENT = (1, 16, 5, 16, 16)  # the tiny preset's latent: 5-D
# The slots of the lab's layout table that ppdit's encode leaves at 0 (the checker's own
# copy: the table is the contract, and a peer builds from the table, not from your code).
DESCRIPTOR = {19: "dtype code", 20: "ndim", **{21 + i: f"shape[{i}]" for i in range(8)},
              29: "generation (reserved in V1)", 30: "reserved", 31: "reserved"}
PPDIT_SLOTS = {0: "magic", 1: "version", 2: "type", 3: "kind", 4: "request_id", 5: "epoch",
               6: "seq", 7: "chunk_index", 8: "num_steps", 9: "seed", 10: "number of fields",
               **{11 + i: f"field id {i}" for i in range(8)}}


def _code(dtype: torch.dtype) -> int:
    from ppdit.runtime.comm.wire import DTYPES

    return DTYPES.index(dtype)


def _wire(version: int, kind_code: int, request_id: int, chunk_index: int, dtype_code: int,
          shape: tuple[int, ...], generation: int = 0, *, magic: int | None = None
          ) -> torch.Tensor:
    """The header a correct peer sends: slots 0..18 from ppdit's encode, the rest from the
    layout table. In a V1 header ``generation`` lands in the reserved slot (a peer that
    breaks the "write 0" promise), to see whether the reader ignores it."""
    from ppdit.serve.protocol import PPEnvelopeV1, encode

    env = PPEnvelopeV1(request_id=request_id, epoch=0, seq=0, chunk_index=chunk_index,
                       num_steps=0, seed=0)
    wire = encode(env, version=version)[0].clone()
    wire[3] = kind_code  # may be a code encode refuses: a newer peer's kind
    if magic is not None:
        wire[0] = magic
    wire[19], wire[20] = dtype_code, len(shape)
    wire[21:21 + len(shape)] = torch.tensor(shape, dtype=torch.int64)
    wire[29] = generation
    return wire


def _drawn(impl, rng) -> list:
    """Headers drawn at this run (hidden cases: no list of them exists to fit)."""
    H, out = impl.ChunkHeader, []
    codes = [_code(t) for t in (torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                torch.uint8)]
    for _ in range(30):
        version, kind = rng.choice((impl.V1, impl.V2)), rng.randrange(3)
        shape = tuple(rng.randint(1, 200) for _ in range(rng.randint(1, 8)))
        args = (version, kind, rng.randrange(2**50), rng.randrange(10_000), rng.choice(codes),
                shape)
        out.append(H(*args, generation=rng.randrange(2**40)) if version == impl.V2
                   else H(*args))
    return out


def _headers(impl) -> list:
    """Headers every correct pack/unpack must carry through unchanged."""
    H, V1, V2 = impl.ChunkHeader, impl.V1, impl.V2
    return [
        H(V2, 0, 3, 0, _code(torch.bfloat16), LATENT, generation=4),
        H(V1, 1, 2**40 + 3, 17, _code(torch.float32), LATENT),
        H(V2, 2, 0, 0, _code(torch.int64), (3,)),
        H(V2, 0, 5, 2, _code(torch.float16), (2, 1, 3, 1, 2, 1, 1, 4), generation=2**33),
        H(V1, 0, 9, 1, _code(torch.uint8), (2, 3)),
        H(V2, 0, 6, 3, _code(torch.float32), (1, 16, 2, 60, 104)),  # 480p latent, 2 frames
    ]


def _packed(impl, header) -> torch.Tensor:
    wire = impl.pack(header)
    assert isinstance(wire, torch.Tensor) and wire.dtype == torch.int64 \
        and tuple(wire.shape) == (impl.HEADER_LEN,), (
            f"pack must return a ({impl.HEADER_LEN},) int64 tensor (what goes on the wire), got "
            f"{type(wire).__name__} {getattr(wire, 'dtype', '')} "
            f"{tuple(getattr(wire, 'shape', ()))}")
    return wire


def _check_round_trips(impl, headers: list) -> None:
    for header in headers:
        back = impl.unpack(_packed(impl, header))
        for f in fields(header):
            a, b = getattr(header, f.name), getattr(back, f.name)
            assert a == b, (f"round trip changed {f.name}: packed {a!r}, unpacked {b!r} "
                            f"(header {header})")


def _check_ppdit_agrees(impl, headers: list) -> None:
    """ppdit's encode and decode are the peer: compare slot by slot."""
    from ppdit.serve.protocol import KINDS, ProtocolError, decode

    for header in headers:
        wire = _packed(impl, header)
        if header.version == impl.V1:
            try:
                env = decode(wire, [])
            except Exception as err:
                raise AssertionError(
                    f"ppdit's decode refused your version-{impl.V1} header for {header}: "
                    f"{type(err).__name__}: {err}. It reads the slots where ppdit's encode "
                    f"puts them; your header holds {wire.tolist()}") from err
            got = (env.request_id, env.chunk_index, env.kind)
            want = (header.request_id, header.chunk_index, KINDS[header.kind_code])
            assert got == want, (
                f"ppdit's decode reads (request, chunk, kind) = {got} from your header, you "
                f"packed {want}: a peer built from ppdit's layout would misread every field "
                "your own unpack reads back (the round trip with yourself proves nothing)")
        else:
            try:
                decode(wire, [])
            except ProtocolError as err:
                assert f"version {header.version}" in str(err), (
                    f"ppdit's decode refused your version-{header.version} header, but not for "
                    f"its version: {err}")
            else:
                raise AssertionError(f"ppdit's decode (a version-{impl.V1} reader) accepted "
                                     f"your version-{header.version} header: slot 1 must hold "
                                     "the version")
    for header in headers:
        wire = _packed(impl, header)
        want = _wire(header.version, header.kind_code, header.request_id, header.chunk_index,
                     header.dtype_code, header.shape,
                     header.generation if header.version >= impl.V2 else 0)
        for slot in range(impl.HEADER_LEN):
            if wire[slot] != want[slot]:
                name = PPDIT_SLOTS.get(slot) or DESCRIPTOR[slot]
                where = ("ppdit's encode writes" if slot in PPDIT_SLOTS
                         else "the layout table says")
                raise AssertionError(
                    f"slot {slot} ({name}) of your header for {header} holds "
                    f"{int(wire[slot])}, {where} {int(want[slot])}: a peer reads the slots "
                    "where the table puts them, whatever your own unpack does")


def _must_refuse(call, what: str) -> None:
    try:
        call()
    except NotImplementedError:
        raise
    except ValueError:
        return
    except Exception as err:
        raise AssertionError(f"{what}: expected a ValueError, got {type(err).__name__}: "
                             f"{err}") from err
    raise AssertionError(what)


def _check_edges(impl) -> None:
    from ppdit.runtime.comm.wire import MAGIC as P2P_MAGIC

    H, V1, V2 = impl.ChunkHeader, impl.V1, impl.V2
    nine = (1,) * 9
    _must_refuse(lambda: impl.pack(H(V2, 0, 1, 0, _code(torch.float32), nine)),
                 "pack accepted a 9-D shape, but the header has 8 shape slots: a shape it "
                 "cannot hold must be an error, never a truncation")
    _must_refuse(lambda: impl.pack(H(V2 + 1, 0, 1, 0, _code(torch.float32), LATENT)),
                 f"pack wrote version {V2 + 1}, a layout this code does not know")
    _must_refuse(lambda: impl.pack(H(V1, 0, 1, 0, _code(torch.float32), LATENT,
                                     generation=3)),
                 f"pack accepted generation 3 in a version-{V1} header, which has no slot for "
                 f"it: dropping it silently is the truncation bug again (write version {V2})")
    good = _packed(impl, H(V2, 0, 1, 0, _code(torch.float32), LATENT))
    foreign = _wire(V2, 0, 1, 0, _code(torch.float32), LATENT, magic=P2P_MAGIC)
    for wire, what in [(good.float(), "a float32 tensor"),
                       (good[:12], "12 int64 (a p2p tensor header)"),
                       (foreign, "a header with another message's magic number")]:
        _must_refuse(lambda wire=wire: impl.unpack(wire),
                     f"unpack accepted {what} as a chunk header")


def _check_v1_default(impl) -> None:
    V1, V2, default = impl.V1, impl.V2, impl.DEFAULT_GENERATION
    wire = _wire(V1, 0, 41, 12, _code(torch.float32), LATENT, generation=default + 5)
    header = impl.unpack(wire)
    assert header.version == V1, f"unpack read version {header.version} from a V1 header"
    assert header.generation == default, (
        f"a version-{V1} header holding {default + 5} in its reserved slot 29 unpacked to "
        f"generation={header.generation}: in V1 that slot means nothing, so a V1 header's "
        f"generation is DEFAULT_GENERATION ({default}) whatever the slot holds")
    try:
        impl.check(header, impl.Expected(V2, 41, 12, torch.float32, LATENT))
    except ValueError as err:
        raise AssertionError(f"a version-{V2} receiver refused a valid version-{V1} header "
                             f"(receivers upgrade first, so they must read both): {err}") from err


def _refused(impl, header, expected, rule: str, names: list[str], missing: str) -> None:
    """``check`` must raise ValueError starting with ``rule`` and naming every value."""
    try:
        impl.check(header, expected)
    except NotImplementedError:
        raise
    except ValueError as err:
        msg = str(err)
        assert msg.lower().startswith(rule), (
            f"check refused {header} for {expected}, but its message does not start with the "
            f"rule {rule!r}: {msg!r}")
        for name in names:
            assert name in msg, (f"check's {rule} message does not name {name!r} (name the "
                                 f"header's value and the receiver's): {msg!r}")
        return
    except Exception as err:
        raise AssertionError(f"check must raise ValueError ({rule}), it raised "
                             f"{type(err).__name__}: {err}") from err
    raise AssertionError(f"{rule} rule missing: {missing}")


def _check_rules(impl) -> None:
    H, E, V1, V2 = impl.ChunkHeader, impl.Expected, impl.V1, impl.V2
    fp32 = _code(torch.float32)

    def header(version=V2, kind=0, request=41, chunk=12, dtype=fp32, shape=LATENT):
        return H(version, kind, request, chunk, dtype, shape)

    v2, v1 = E(V2, 41, 12, torch.float32, LATENT), E(V1, 41, 12, torch.float32, LATENT)
    for h, e in [(header(), v2), (header(V1), v2), (header(V1), v1), (header(kind=1), v2),
                 (header(kind=2), v2)]:
        try:
            impl.check(h, e)
        except ValueError as err:
            raise AssertionError(f"check refused a valid header {h} for {e}: {err}") from err
    _refused(impl, header(V2), v1, "version", [str(V2), str(V1)],
             f"a receiver that speaks version {V1} accepted a version-{V2} header; it cannot "
             "know what a newer header's slots mean, so it must refuse it, naming both")
    for version in (V2 + 1, 0):
        _refused(impl, header(version), v2, "version", [str(version), str(V2)],
                 f"a version-{V2} receiver accepted a version-{version} header")
    for kind in (3, -1):
        _refused(impl, header(kind=kind), v2, "kind", [str(kind), "generate"],
                 f"accepted kind code {kind}; the receiver knows kinds 0..2 only (a new kind "
                 "is a protocol change too)")
    _refused(impl, header(request=40), v2, "request", ["40", "41"],
             "accepted a chunk of request 40 on the stream of request 41")
    for chunk, what in [(11, "a repeated chunk"), (14, "a skipped chunk: 12 and 13 never came")]:
        _refused(impl, header(chunk=chunk), v2, "chunk", [str(chunk), "12"],
                 f"accepted chunk {chunk} when chunk 12 was expected next ({what})")
    for dtype, why in [(torch.bfloat16, "the payload is half the bytes the buffer expects"),
                       (torch.float16, "the same number of bytes: no transport can notice, "
                                       "and every number is garbage")]:
        _refused(impl, header(dtype=_code(dtype)), v2, "dtype", [str(dtype), "float32"],
                 f"accepted a {dtype} payload into a torch.float32 buffer ({why})")
    _refused(impl, header(dtype=99), v2, "dtype", ["99", "float32"],
             "accepted dtype code 99, which is in no dtype table")
    for shape in [(1, 16, 4, 16, 16), (1, 16, 5, 256)]:
        _refused(impl, header(shape=shape), v2, "shape", [str(shape), str(LATENT)],
                 f"accepted a {shape} payload into a {LATENT} buffer")


def check(impl, pool=None) -> None:
    """Every part, pure (``pool`` is accepted for the suite's signature; no ranks start)."""
    from ppdit.teaching.labkit import hidden_cases

    _check_round_trips(impl, _headers(impl))  # the listed headers, then 30 drawn now
    _check_ppdit_agrees(impl, _headers(impl))
    with hidden_cases() as rng:
        headers = _drawn(impl, rng)
        _check_round_trips(impl, headers)
        _check_ppdit_agrees(impl, headers)
    _check_edges(impl)
    _check_v1_default(impl)
    _check_rules(impl)


def test_lab09():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab09_envelope.py"))

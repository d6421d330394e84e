"""The Merkle tree (``ledger.evidence.merkle``) against RFC 6962's published test vectors (the Certificate
Transparency reference leaves, roots and proofs), then as properties: every proof verifies, any change fails."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from ledger.evidence.merkle import (
    EMPTY_ROOT, Frontier, consistency_proof, inclusion_proof, leaf_hash, nodes_of, root, verify_consistency,
    verify_inclusion,
)

DATA = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                   "606162636465666768696a6b6c6d6e6f")]
ROOTS = ["e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
         "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
         "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
         "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
         "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
         "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
         "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
         "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"]
# (leaf index, tree size, audit path) and (old size, new size, proof), RFC 6962's reference vectors
INCLUSION = [(0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                     "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                     "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
             (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                     "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                     "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
             (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
             (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                     "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                     "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"])]
CONSISTENCY = [(1, 1, []),
               (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                       "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                       "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
               (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                       "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                       "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
               (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                       "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"])]
LEAVES = [leaf_hash(d) for d in DATA]


def test_the_reference_roots_of_every_size() -> None:
    assert EMPTY_ROOT.hex() == ROOTS[0]
    frontier = Frontier()
    for n in range(1, 9):
        assert root(nodes_of(LEAVES[:n]), n).hex() == ROOTS[n]
        frontier.append(LEAVES[n - 1])
        assert frontier.root().hex() == ROOTS[n]


def test_the_reference_proofs() -> None:
    for index, size, path in INCLUSION:
        proof = inclusion_proof(nodes_of(LEAVES[:size]), index, size)
        assert [p.hex() for p in proof] == path
        assert verify_inclusion(LEAVES[index], index, size, proof, bytes.fromhex(ROOTS[size]))
        assert not verify_inclusion(LEAVES[index], index, size, proof, bytes.fromhex(ROOTS[size - 1]))
    for old, new, path in CONSISTENCY:
        proof = consistency_proof(nodes_of(LEAVES[:new]), old, new)
        assert [p.hex() for p in proof] == path
        assert verify_consistency(old, new, proof, bytes.fromhex(ROOTS[old]), bytes.fromhex(ROOTS[new]))


leaf_lists = st.lists(st.binary(max_size=8), min_size=1, max_size=40).map(lambda ds: [leaf_hash(d) for d in ds])


@settings(max_examples=150, deadline=None)
@given(leaf_lists, st.data())
def test_every_proof_verifies_and_any_change_fails(leaves: list[bytes], data: st.DataObject) -> None:
    n = len(leaves)
    node = nodes_of(leaves)
    frontier = Frontier()
    made: dict[tuple[int, int], bytes] = {}
    for leaf in leaves:
        made.update(((level, index), h) for level, index, h in frontier.append(leaf))
    assert frontier.root() == root(node, n) == root(lambda lv, i: made[(lv, i)], n)  # the stored nodes agree

    index = data.draw(st.integers(0, n - 1))
    proof = inclusion_proof(node, index, n)
    assert verify_inclusion(leaves[index], index, n, proof, root(node, n))
    other = data.draw(st.integers(0, n - 1))
    if leaves[other] != leaves[index]:
        assert not verify_inclusion(leaves[other], index, n, proof, root(node, n))  # another entry
    if proof:
        k = data.draw(st.integers(0, len(proof) - 1))
        bent = proof[:k] + [bytes(32)] + proof[k + 1:]
        assert not verify_inclusion(leaves[index], index, n, bent, root(node, n))

    old = data.draw(st.integers(1, n))
    cproof = consistency_proof(node, old, n)
    assert verify_consistency(old, n, cproof, root(node, old), root(node, n))
    # the old tree rewritten at any one entry: the new tree no longer extends it
    changed = data.draw(st.integers(0, old - 1))
    rewritten = leaves[:changed] + [leaf_hash(b"rewritten" + leaves[changed])] + leaves[changed + 1:old]
    assert not verify_consistency(old, n, cproof, root(nodes_of(rewritten), old), root(node, n))

"""Kernel-check cases for ``random_ops`` descriptions.

No strategy cuts a stateless sampler, so a case checks that the description
applies to the op (shapes, every input accounted for) and derives no
strategy; the replicated run is the kernel itself.  Shapes that blocks of 2,
3 and 4 would split unevenly, 1-d to 3-d, both seed forms, every dtype the
samplers draw.
"""

from tf_tofu.opdefs.cases import Case, Fixed, Rand

_PHILOX = Fixed(1, "int32")  # RNG_ALG_PHILOX


def _key_counter():
  return [Rand((1,), "uint64", 0, 1000), Rand((2,), "uint64", 0, 1000)]


CASES = [
    Case("StatelessRandomGetKeyCounter", [Rand((2,), "int64", 0, 1000)]),
    Case("StatelessRandomGetKeyCounterAlg", [Rand((2,), "int32", 0, 1000)]),
    Case("StatelessRandomUniformV2", [Fixed([5, 3], "int32"), *_key_counter(), _PHILOX]),
    Case("StatelessRandomUniformV2", [Fixed([7], "int64"), *_key_counter(), _PHILOX],
         {"dtype": "float64"}, label="float64"),
    Case("StatelessRandomNormalV2", [Fixed([3, 2, 5], "int32"), *_key_counter(), _PHILOX]),
    Case("StatelessTruncatedNormalV2", [Fixed([6, 5], "int32"), *_key_counter(), _PHILOX]),
    Case("StatelessRandomUniformFullIntV2", [Fixed([5, 3], "int32"), *_key_counter(), _PHILOX],
         {"dtype": "int64"}),
    Case("StatelessRandomUniformIntV2", [Fixed([9], "int32"), *_key_counter(), _PHILOX,
                                         Fixed(-4, "int32"), Fixed(11, "int32")]),
    Case("StatelessRandomUniform", [Fixed([5, 3], "int32"), Rand((2,), "int64", 0, 1000)]),
    Case("StatelessRandomNormal", [Fixed([4, 3], "int32"), Rand((2,), "int64", 0, 1000)],
         {"dtype": "float64"}, label="float64"),
    Case("StatelessTruncatedNormal", [Fixed([7], "int32"), Rand((2,), "int32", 0, 1000)]),
    Case("StatelessRandomUniformInt", [Fixed([3, 5], "int32"), Rand((2,), "int64", 0, 1000),
                                       Fixed(0, "int64"), Fixed(100, "int64")]),
    Case("StatelessRandomUniformFullInt", [Fixed([6], "int32"), Rand((2,), "int64", 0, 1000)],
         {"dtype": "uint32"}),
]

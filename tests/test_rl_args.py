"""The RL configurations: one dataclass per method, normalised and checked field by field."""

import pytest

from shardlab.errors import ShardlabError
from shardlab.experiments.train_autoshard import AutoShardArgs
from shardlab.experiments.train_dreamshard import DreamShardArgs


def test_device_counts_and_table_ranges_are_normalised():
    assert DreamShardArgs(ngpu=4).ngpu == (4,) and AutoShardArgs(ngpu=[4, 8]).ngpu == (4, 8)
    assert DreamShardArgs(ntables=[5, 9]).ntables == (5, 9)
    assert DreamShardArgs(measure_per_iteration=0).measure_per_iteration == 0   # RL on the model alone


@pytest.mark.parametrize("cls,field,value", [(AutoShardArgs, "updates", 0), (DreamShardArgs, "episodes", 0),
                                             (AutoShardArgs, "ngpu", 0), (DreamShardArgs, "ntables", (9, 5))])
def test_a_bad_field_is_one_line_naming_it(cls, field, value):
    with pytest.raises(ShardlabError) as e:
        cls(**{field: value})
    assert f"{cls.__name__}: field '{field}'" in str(e.value) and "\n" not in str(e.value)


def test_every_field_is_documented():
    import ast
    import inspect

    for cls in (DreamShardArgs, AutoShardArgs):
        body = ast.parse(inspect.getsource(cls)).body[0].body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                doc = body[i + 1]
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), node.target.id

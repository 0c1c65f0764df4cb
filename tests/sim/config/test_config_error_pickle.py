"""ConfigError survives pickling, as a worker process's exception must (run.py --jobs 2)."""
import pickle

from sim.errors import ConfigError


def test_config_error_round_trips_through_pickle():
    err = ConfigError("cases/x.yaml", "workload.prompt_tokens.low", "required key is missing")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ConfigError
    assert str(back) == "cases/x.yaml: workload.prompt_tokens.low: required key is missing"
    assert (back.file, back.key, back.message) == (err.file, err.key, err.message)


def test_config_error_pickle_keeps_the_one_line_form():
    err = ConfigError("a\nb.yaml", "k", "bad\tvalue")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err)
    assert "\n" not in str(back)

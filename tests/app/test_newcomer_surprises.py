"""A newcomer's surprises (issue 50.8), each fixed with a test."""


def test_momentum_decay_is_off_under_adamw_and_says_why():
    """Issue 50: Train showed "Momentum decay" under AdamW, which has none to set."""
    from tests.support import app_test

    at = app_test(120)
    at.query_params.update({"opt": "adamw"})
    at.switch_page("app_pages/train.py")
    at.run()
    assert not at.exception, at.exception
    decay = at.number_input(key="decay")
    assert decay.disabled and "adamw keeps its own decays" in decay.help
    seed = app_test(120)
    seed.switch_page("app_pages/train.py")
    seed.run()
    assert not seed.number_input(key="decay").disabled  # the seed's momentum SGD: its decay is the box's

"""DTI's named training schedules (``schedule``: paper, the default, or quick, docs/dti.md's CPU recipe)."""
import numpy as np

import ticlust
from ticlust.core.params import param_infos
from ticlust.methods import get_method
from ticlust.methods.dti import QUICK_SCHEDULE


def test_quick_sets_the_recipe_where_left_at_the_papers_values():
    for name in ("dti-kmeans", "dti-gmm"):
        method = get_method(name)
        paper, quick = method.make_config(k=3), method.make_config(k=3, schedule="quick")
        assert paper.schedule == "paper" and (paper.max_epochs, paper.encoder_stride, paper.prototype_lr) == (120, 1, 1.0)
        assert {key: getattr(quick, key) for key in QUICK_SCHEDULE} == QUICK_SCHEDULE
        mine = method.make_config(k=3, schedule="quick", max_epochs=40, prototype_lr="5")
        assert (mine.max_epochs, mine.prototype_lr, mine.encoder_stride, mine.final_epochs) == (40, 5.0, 2, 8)


def test_the_form_offers_both_schedules_with_a_tooltip():
    info = {p.name: p for p in param_infos(get_method("dti-kmeans").config)}["schedule"]
    assert info.choices == ("paper", "quick") and info.default == "paper" and info.essential and "CPU" in info.doc


def test_a_quick_fit_records_its_schedule_and_the_values_it_ran_with(one_thread):
    x, _ = ticlust.sample("glyphs")
    x = np.asarray(x)[::20]
    r = ticlust.fit(x, "dti-kmeans", k=3, seed=0, device="cpu", progress=False, schedule="quick", max_epochs=2,
                    min_stage_epochs=1, patience=1, final_epochs=1, batch_size=16)
    assert r.config["schedule"] == "quick" and r.config["encoder_stride"] == 2 and r.config["prototype_lr"] == 20.0
    assert r.config["max_epochs"] == 2 and len(r.labels) == len(x)
    again = get_method("dti-kmeans").config_of(r)
    assert (again.max_epochs, again.encoder_stride, again.stage_share) == (2, 2, 0.2)

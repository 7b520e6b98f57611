# Two commands a newcomer needs: `make lab` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: lab test release autograde feedback grades benchmark checkpoint clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[course,test]'
	touch $(STAMP)

# As root (a container, say) JupyterLab insists on --allow-root.
lab: $(STAMP)
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/ch12

test: $(STAMP)
	$(BIN)/python -m pytest

# --- instructor jobs (see README, "For instructors") ---
release: $(STAMP)
	$(BIN)/course release

autograde: $(STAMP)
	$(BIN)/course autograde

feedback: $(STAMP)
	$(BIN)/course feedback

grades: $(STAMP)
	$(BIN)/course grades

checkpoint: $(STAMP)
	$(BIN)/python checkpoints/ch12_worker_recovery_checkpoint.py --evidence

benchmark: $(STAMP)
	$(BIN)/python benchmarks/claim_benchmark.py

clean:
	rm -rf $(VENV) submitted autograded feedback gradebook.db
